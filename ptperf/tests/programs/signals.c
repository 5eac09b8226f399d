/* Signal handlers: SIGUSR1 raised (delivered on a system call's way out,
 * the handler returns through rt_sigreturn), and a SIGSEGV from a store
 * through NULL whose handler leaves with siglongjmp. Deterministic. */
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static volatile long hits;
static sigjmp_buf back;

static void on_usr1(int sig) {
  for (int i = 0; i < 20; i++) hits += sig + i;
}

static void on_segv(int sig) {
  hits += sig;
  siglongjmp(back, 1);
}

int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, 0);
  sa.sa_handler = on_segv;
  sigaction(SIGSEGV, &sa, 0);
  for (int i = 0; i < 3; i++) raise(SIGUSR1);
  kill(getpid(), SIGUSR1);
  if (!sigsetjmp(back, 1)) *(volatile int *)0 = 1;
  char c = 'a' + (hits & 15);
  return write(1, &c, 1) != 1;
}
