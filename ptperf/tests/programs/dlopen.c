/* Loads libm with dlopen and calls into it through dlsym. */
#include <dlfcn.h>
#include <stdio.h>

int main(void) {
  void *m = dlopen("libm.so.6", RTLD_NOW);
  if (!m) return 1;
  double (*cosine)(double) = (double (*)(double))dlsym(m, "cos");
  double s = 0;
  for (int i = 0; i < 50; i++) s += cosine(i * 0.1);
  printf("%d\n", (int)(s * 1000));
  return dlclose(m);
}
