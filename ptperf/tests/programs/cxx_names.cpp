// C++ names as perf prints them: templates, a namespace member, an exception
// thrown and caught (libstdc++ and libgcc's unwinder through their .plt), the
// throwing paths moved into `.cold` parts by g++ -O2, and a clone (.isra).
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

template <typename T> __attribute__((noinline)) T twice(T x) { return x + x; }

namespace shapes {
struct Square {
  int side;
  __attribute__((noinline)) int area(int scale) const { return side * side * scale; }
};
} // namespace shapes

__attribute__((noinline)) int checked(int x) {
  if (__builtin_expect(x == 12345, 0))
    throw std::runtime_error("unlucky");
  return x + 1;
}

__attribute__((noinline)) int guarded(int x) {
  try {
    return checked(x);
  } catch (const std::exception &e) {
    std::puts(e.what());
    return -1;
  }
}

int main(int argc, char **) {
  std::vector<std::string> names;
  int sum = 0;
  for (int i = 0; i < 40; i++) {
    sum += guarded(i + argc);
    sum += twice<int>(i);
    sum += (int)twice<double>(i);
    names.push_back(std::to_string(i));
  }
  shapes::Square sq{3};
  sum += sq.area(argc);
  sum += guarded(12345 + argc - 1);
  return (sum + (int)names.size()) & 1;
}
