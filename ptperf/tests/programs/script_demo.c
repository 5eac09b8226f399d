/* A program with calls, returns, loops, recursion, indirect calls and a
 * syscall, built with symbols, for the perf script conformance test. */
#include <unistd.h>

static int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

static int twice(int x) { return 2 * x; }
static int plus3(int x) { return x + 3; }

int (*volatile ops[2])(int) = {twice, plus3};

__attribute__((noinline)) int work(int k) {
  int s = 0;
  for (int i = 0; i < k; i++) {
    s += fib(i % 8);
    s = ops[i & 1](s);
    if (s & 1)
      s ^= 3;
  }
  return s;
}

int main(void) {
  int r = work(12);
  char c = '0' + (r & 7);
  write(1, &c, 1);
  return r & 1;
}
