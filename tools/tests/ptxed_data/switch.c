static int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
static int sq(int n) { return n * n; }
static int (*fps[2])(int) = { fib, sq };
__attribute__((noinline)) static long sw(int k, long v) {
    switch (k & 7) {
    case 0: return v * 3;
    case 1: return v ^ 0x55;
    case 2: return v / 7;
    case 3: return v << 2;
    case 4: return v - 11;
    case 5: return v % 13;
    case 6: return -v;
    default: return v + 1;
    }
}
__attribute__((noinline)) static void copy(char *d, const char *s, int n) { for (int i = 0; i < n; i++) d[i] = s[i] ^ (char)i; }
static char buf[256], src[256];
void _start(void) {
    volatile long r = 0;
    for (int i = 0; i < 300; i++) {
        r += fps[i & 1](i % 10);
        r = sw(i, r);
        if (i % 17 == 0) copy(buf, src, 200);
    }
    __asm__ volatile("mov $60, %%eax; xor %%edi, %%edi; syscall" ::: "memory");
}
