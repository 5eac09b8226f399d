/* A program for the listing tests: integer and floating-point loops, a switch
 * through a jump table, calls through pointers, and the C library's string,
 * sort and formatting code (SSE/AVX string functions, x87 in printf's long
 * double paths). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return (x > y) - (x < y);
}

static long step(long v, int k)
{
	switch (k & 7) {
	case 0: return v * 3 + 1;
	case 1: return v >> 1;
	case 2: return v ^ 0x5555;
	case 3: return v + k;
	case 4: return v - (k << 2);
	case 5: return v * v % 1000003;
	case 6: return ~v;
	default: return v / 7;
	}
}

static long (*volatile op)(long, int) = step;

int main(int argc, char **argv)
{
	long data[512];
	char text[256], copy[256];
	double acc = 0.0;
	long double big = 1.0L;
	unsigned long seed = 88172645463325252ul + (unsigned long)argc;

	for (int i = 0; i < 512; i++) {
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
		data[i] = op((long)(seed % 100000), i);
	}
	qsort(data, 512, sizeof(data[0]), cmp);
	for (int i = 0; i < 512; i++) {
		acc += sqrt((double)(data[i] & 0xffff)) / (i + 1.0);
		big *= 1.0001L;
	}
	snprintf(text, sizeof(text), "%s %ld %ld %.6f %.3Lf %x", argc > 0 ? argv[0] : "?",
		 data[0], data[511], acc, big, (unsigned)seed);
	memcpy(copy, text, strlen(text) + 1);
	printf("%zu %d %s\n", strlen(copy), strcmp(copy, text), copy);
	return 0;
}
