/* A small program for the AutoFDO tests: known call and line counts.
   Lines marked L_* are looked up by the tests. */
#include <stdio.h>
#include <stdlib.h>

static int table[256];

__attribute__((noinline)) static int work(int x) {
    int s = 0;
    for (int i = 0; i < 8; i++) /* L_WORK_LOOP */
        s += table[(x + i) & 255] * (i + 1); /* L_WORK_BODY */
    return s;
}

static inline int square(int v) {
    return v * v; /* L_SQUARE */
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 3000;
    long total = 0;
    for (int i = 0; i < 256; i++)
        table[i] = i * 7 % 13;
    for (int i = 0; i < n; i++) {
        total += work(i); /* L_CALL */
        if (i % 3 == 0)
            total += square(i); /* L_INLINED */
    }
    printf("%ld\n", total);
    return 0;
}
