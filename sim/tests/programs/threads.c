/* Two threads: the main one and a worker, each summing with calls through a
 * pointer; the main one joins the worker. */
#include <pthread.h>
#include <unistd.h>

static long step(long x, long i) { return x * 3 + i; }
static long (*volatile op)(long, long) = step;

static void *worker(void *arg) {
  long acc = (long)arg;
  for (long i = 0; i < 500; i++) acc = op(acc, i) & 0xffff;
  return (void *)acc;
}

int main(void) {
  pthread_t t;
  if (pthread_create(&t, 0, worker, (void *)7)) return 1;
  long acc = 1;
  for (long i = 0; i < 300; i++) acc = op(acc, i) & 0xfff;
  void *r;
  pthread_join(t, &r);
  char buf[2] = {(char)('a' + ((acc + (long)r) & 15)), '\n'};
  return write(1, buf, 2) != 2;
}
