/* Busy for a while (about 0.1 s) in a few functions, then exits: sampled
 * recordings (perf record -e cpu-clock) catch it in each. */
#include <stdio.h>

static volatile unsigned long sink;

__attribute__((noinline)) unsigned long mix(unsigned long x) {
  return (x * 2862933555777941757UL + 3037000493UL) ^ (x >> 17);
}

__attribute__((noinline)) unsigned long inner(unsigned long n) {
  unsigned long x = n;
  for (int i = 0; i < 4000; i++) x = mix(x);
  return x;
}

__attribute__((noinline)) unsigned long outer(int rounds) {
  unsigned long acc = 0;
  for (int r = 0; r < rounds; r++) acc += (r & 1) ? inner(acc) : mix(acc);
  return acc;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? 10 : 20000;
  sink = outer(rounds);
  printf("%lu\n", sink);
  return 0;
}
