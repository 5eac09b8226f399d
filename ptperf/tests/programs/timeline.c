/* ptperf timeline's and --flamegraph's program: the main thread and two
 * workers, each calling functions of its own (nested, so that slices nest),
 * statically linked, no inlining. With an argument N, main works alone: it
 * calls hot_big (about twice hot_small's instructions) and hot_small. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static volatile long sink;

NOINLINE static long mix_leaf(long x) { return (x * 2654435761L) ^ (x >> 7); }

NOINLINE static long red_inner(long n) {
  long a = 0;
  for (long i = 0; i < n; i++) a += mix_leaf(i);
  return a;
}

NOINLINE static long red_outer(long n) {
  long a = 0;
  for (int k = 0; k < 6; k++) a += red_inner(n);
  return a;
}

NOINLINE static void *red_worker(void *arg) {
  sink = red_outer((long)arg);
  return 0;
}

NOINLINE static long blue_inner(long n) {
  long a = 1;
  for (long i = 0; i < n; i++) a = a * 3 + mix_leaf(a);
  return a;
}

NOINLINE static void *blue_worker(void *arg) {
  long a = 0;
  for (int k = 0; k < 5; k++) a += blue_inner((long)arg);
  sink = a;
  return 0;
}

NOINLINE static long hot_big(long n) {
  long a = 0;
  for (long i = 0; i < 2 * n; i++) a += (a ^ i) * 7 + (i >> 3);
  return a;
}

NOINLINE static long hot_small(long n) {
  long a = 0;
  for (long i = 0; i < n; i++) a += (a ^ i) * 5 + (i >> 2);
  return a;
}

NOINLINE static long green_main(long n) { return hot_big(n) + hot_small(n); }

int main(int argc, char **argv) {
  if (argc > 1) {
    long n = atol(argv[1]);
    sink = hot_big(n) + hot_small(n);
    return 0;
  }
  pthread_t r, b;
  if (pthread_create(&r, 0, red_worker, (void *)150)) return 1;
  if (pthread_create(&b, 0, blue_worker, (void *)120)) return 1;
  sink = green_main(400);
  pthread_join(r, 0);
  pthread_join(b, 0);
  return 0;
}
