// A C++ exception thrown through a few frames and caught: the unwinder
// returns into the landing pad through an indirect jump.
#include <cstdio>
#include <stdexcept>

__attribute__((noinline)) static int deep(int n) {
  if (n == 0) throw std::runtime_error("bottom");
  return deep(n - 1) + 1;
}

int main() {
  int caught = 0;
  for (int i = 0; i < 3; i++) {
    try {
      deep(5 + i);
    } catch (const std::exception &e) {
      caught += e.what()[0];
    }
  }
  std::printf("%d\n", caught);
  return 0;
}
