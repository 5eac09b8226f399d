// Functions whose demangled names run past a thousand characters (templates
// over nested standard containers), calling each other: perf cuts a call
// graph line's name, and a column title, at 1,023 characters.
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

using Row = std::map<std::string, std::vector<std::pair<std::string, int>>>;

template <class A, class B, class C>
__attribute__((noinline)) int inner(int n) {
  int s = 0;
  for (int i = 0; i < n; i++) s += (i * 7) % 13;
  return s + static_cast<int>(sizeof(A) + sizeof(B) + sizeof(C));
}

template <class A, class B, class C, class D>
__attribute__((noinline)) int outer(int n) {
  int s = 0;
  for (int i = 0; i < n; i++) s += inner<A, B, C>(200 + i % 5);
  return s + static_cast<int>(sizeof(D));
}

int main() {
  int s = 0;
  for (int i = 0; i < 200; i++) s += outer<Row, Row, Row, Row>(20);
  std::printf("%d\n", s);
  return 0;
}
