/* Calls with known counts for the export tests: mid 200 times, leaf 800
 * times, fib 1973 times (fib(15) and its recursion). No libc: the recording
 * holds only this code. */

__attribute__((noinline)) static long leaf(long x) { return x * 3 + 1; }

__attribute__((noinline)) static long mid(long x)
{
	long s = 0;
	for (int i = 0; i < 4; i++)
		s += leaf(x + i);
	return s;
}

__attribute__((noinline)) static long fib(long n)
{
	return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

void _start(void)
{
	long s = 0;
	for (int i = 0; i < 200; i++)
		s += mid(i);
	s += fib(15);
	__asm__ volatile("syscall" : : "a"(60), "D"(s & 0x7f));
	for (;;)
		;
}
