/* What perf_parent's child executes: other code at the same addresses. */
static long sys(long n, long a) {
  long r;
  __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a) : "rcx", "r11", "memory");
  return r;
}

__attribute__((noinline)) static unsigned spin(unsigned x, int n) {
  for (int i = 0; i < n; i++)
    x = (x >> 1) ^ (-(x & 1u) & 0xedb88320u);
  return x;
}

void start_c(void) {
  unsigned v = spin(1, 40);
  v += spin(v, 25);
  sys(60, v == 12345);
}

__asm__(".text\n.globl _start\n_start:\n and $-16, %rsp\n call start_c\n hlt\n");
