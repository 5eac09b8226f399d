/* Busy for argv[1] rounds of a short loop (a block each), then prints a
 * byte of what it computed: a child that writes a long trace. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static unsigned long step(unsigned long x, long i) {
  return (i & 7) ? x * 3 + 1 : x ^ (unsigned long)i;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000;
  unsigned long x = 1;
  for (long i = 0; i < n; i++) x = step(x, i);
  printf("%lu\n", x & 0xff);
  return 0;
}
