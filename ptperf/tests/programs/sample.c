/* A small libc program for the simulator's end-to-end tests: loops, recursion,
 * calls through pointers (also from libc's qsort), a switch jump table and a
 * few system calls. Deterministic. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

static int cmp(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

__attribute__((noinline)) static int classify(int v) {
  switch (v % 7) {
  case 0: return v * 3;
  case 1: return v + 11;
  case 2: return v ^ 0x55;
  case 3: return v - 4;
  case 4: return v << 2;
  case 5: return v / 3;
  default: return -v;
  }
}

static int (*ops[2])(int) = {classify, fib};

int main(int argc, char **argv) {
  (void)argv;
  int data[40];
  unsigned s = 12345;
  for (int i = 0; i < 40; i++) {
    s = s * 1103515245u + 12345u;
    data[i] = (int)(s >> 16) % 1000;
  }
  qsort(data, 40, sizeof data[0], cmp);
  long acc = 0;
  for (int i = 0; i < 40; i++) acc += ops[i & (argc > 5)](data[i]);
  acc += fib(12);
  char buf[64];
  int n = snprintf(buf, sizeof buf, "%ld %d\n", acc, data[39]);
  if (write(1, buf, (size_t)n) != n) return 1;
  return getpid() == 0;
}
