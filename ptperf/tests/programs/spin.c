/* No libc: some calls and branches, then "ready\n" on stdout, then a loop
 * that never ends. Tests start a recording of it, wait for the line (the
 * program has run that far, whatever the execution source) and then stop
 * or signal the recorder. */
static long sys3(long n, long a, long b, long c) {
  long r;
  __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
  return r;
}
static volatile int hits;
__attribute__((noinline)) int f(int x) { return x * 3 + 1; }
__attribute__((noinline)) int g(int x) { return x ^ 5; }
void start_c(void) {
  int acc = 0;
  for (int i = 0; i < 100; i++) acc += (i % 3 == 0) ? f(i) : g(i);
  hits = acc;
  sys3(1, 1, (long)"ready\n", 6);
  for (;;) hits = f(hits);
}
__asm__(".text\n.globl _start\n_start:\n and $-16, %rsp\n call start_c\n hlt\n");
