/* Two threads besides the main one, each computing for a while; the clock read
 * through the vdso. */
#include <pthread.h>
#include <time.h>

static int work(int seed, int n) {
  int acc = seed;
  for (int i = 0; i < n; i++)
    acc = (acc * 1103515245 + 12345) ^ (acc >> 7);
  return acc;
}

static void *run(void *arg) {
  long k = (long)arg;
  return (void *)(long)work((int)k, 300 + 50 * (int)k);
}

int main(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  pthread_t t[2];
  for (long i = 0; i < 2; i++)
    pthread_create(&t[i], 0, run, (void *)(i + 1));
  int acc = work(3, 200);
  for (int i = 0; i < 2; i++) {
    void *r;
    pthread_join(t[i], &r);
    acc += (int)(long)r;
  }
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (acc + ts.tv_nsec) == 42;
}
