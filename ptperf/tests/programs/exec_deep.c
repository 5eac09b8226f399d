/* Forks; the child executes argv[1] from five calls deep, so that the frames
 * of its call chain at the exec belong to the program before it. */
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) int spin(int n) {
  int a = 1;
  for (int i = 0; i < n; i++)
    a = a * 3 + i;
  return a;
}

__attribute__((noinline)) void deep(int d, char **argv) {
  if (d) {
    deep(d - 1, argv);
    spin(d);
    return;
  }
  execv(argv[1], argv + 1);
  perror("execv");
}

int main(int argc, char **argv) {
  if (argc < 2)
    return 2;
  spin(1000);
  pid_t p = fork();
  if (p == 0) {
    spin(500);
    deep(5, argv);
    _exit(1);
  }
  int st;
  waitpid(p, &st, 0);
  spin(2000);
  return 0;
}
