/* "ready" on stdout, then bursts of calls and branches with a millisecond's
 * sleep between them, until it is stopped: tests signal the recorder while
 * it runs (a few seconds, whatever the execution source's speed). */
#include <stdio.h>
#include <time.h>

static volatile int hits;
__attribute__((noinline)) int f(int x) { return x * 3 + 1; }
__attribute__((noinline)) int g(int x) { return x ^ 5; }

int main(void) {
  struct timespec ms = {0, 1000000};
  printf("ready\n");
  fflush(stdout);
  for (;;) {
    for (int i = 0; i < 2000; i++) hits = (i % 3 == 0) ? f(hits) : g(hits);
    nanosleep(&ms, NULL);
  }
}
