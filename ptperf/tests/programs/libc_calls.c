/* A loop in the program that calls into libc. Built without PIE, the
 * program's code lies below 4 GiB and libc's far above it: a PSB while the
 * loop runs comes after a last IP in libc. Deterministic. */
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  (void)argv;
  char buf[32] = "hello, world";
  long acc = 0;
  for (int i = 0; i < 20000; i++) {
    buf[i % 8] = (char)('a' + i % 26);
    acc += (long)strlen(buf) + labs((long)i - 10000);
    if (acc % 3 == argc) acc ^= i;
  }
  return (int)(acc & 1);
}
