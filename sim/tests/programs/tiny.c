/* A program without libc: deterministic, about a thousand instructions.
 * argv[1][0] selects extra behaviour: w write, r rep movsb, s signal handler,
 * b breakpoint (INT3), i ignored signal, t SIGTRAP sent to itself, p signal during pause(), c crash, m mmap/mprotect/munmap, e exec itself, l loop forever.
 * Direct calls to f, indirect calls through fp (to g unless argc > 5). */
typedef unsigned long u64;
static long sys6(long n, long a, long b, long c, long d, long e, long f) {
  long r;
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  register long r9 __asm__("r9") = f;
  __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9) : "rcx", "r11", "memory");
  return r;
}
#define sys(n, a, b, c) sys6(n, a, b, c, 0, 0, 0)
struct ksigaction { void (*handler)(int); u64 flags; void (*restorer)(void); u64 mask; };
void restorer(void);
__asm__(".text\n.globl restorer\nrestorer:\n mov $15, %eax\n syscall\n hlt\n");
static volatile int hits;
static void handler(int s) { (void)s; hits++; }
__attribute__((noinline)) int f(int x) { return x * 3 + 1; }
__attribute__((noinline)) int g(int x) { return x ^ 5; }
static char buf_a[64], buf_b[64];
void start_c(long *sp) {
  long argc = sp[0];
  char **argv = (char **)(sp + 1);
  char mode = argc > 1 ? argv[1][0] : 'x';
  int (*fp)(int) = (argc > 5) ? f : g;
  int acc = 0;
  for (int i = 0; i < 50; i++) acc += (i % 3 == 0) ? f(i) : fp(i);
  if (mode == 'w') sys(1, 1, (long)"hi\n", 3);
  if (mode == 'r') { for (int i = 0; i < 64; i++) buf_a[i] = i; __asm__ volatile("rep movsb" : : "S"(buf_a), "D"(buf_b), "c"(64) : "memory"); acc += buf_b[63]; }
  if (mode == 's' || mode == 'i' || mode == 't') {
    struct ksigaction sa = { mode != 'i' ? handler : (void (*)(int))1, 0x04000000 /* SA_RESTORER */, restorer, 0 };
    int signo = mode == 't' ? 5 /* SIGTRAP */ : 10 /* SIGUSR1 */;
    sys6(13, signo, (long)&sa, 0, 8, 0, 0);
    long pid = sys(39, 0, 0, 0);
    sys(62, pid, signo, 0);
    sys(62, pid, signo, 0);
    acc += hits;
  }
  if (mode == 'p') {
    /* A signal interrupts a blocking system call: pause() returns -EINTR. */
    struct ksigaction sa = { handler, 0x04000000, restorer, 0 };
    sys6(13, 14 /* SIGALRM */, (long)&sa, 0, 8, 0, 0);
    long timer[4] = { 0, 0, 0, 20000 };
    sys(38, 0 /* ITIMER_REAL */, (long)timer, 0);
    acc += sys(34, 0, 0, 0) == -4;
    acc += hits;
  }
  if (mode == 'c') *(volatile int *)8 = 1;
  if (mode == 'b') __asm__ volatile("int3");
  if (mode == 'm') {
    long p = sys6(9, 0, 8192, 3, 0x22, -1, 0);
    sys(10, p, 4096, 1);
    sys(11, p, 8192, 0);
  }
  if (mode == 'e') { char *av[] = { argv[0], "w", 0 }; sys(59, (long)argv[0], (long)av, (long)(argv + argc + 1)); }
  if (mode == 'l') for (;;) hits = f(hits);
  sys(231, acc & 0x7f, 0, 0);
  for (;;) {}
}
__asm__(".text\n.globl _start\n_start:\n mov %rsp, %rdi\n and $-16, %rsp\n call start_c\n hlt\n");
