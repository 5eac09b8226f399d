// Nine C++ threads that take turns at a mutex: their traces interleave at many
// thread switches, where two threads' samples can share a timestamp.
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

static std::mutex lock;
static long total;

__attribute__((noinline)) long work(int k) {
  long s = 0;
  for (int i = 0; i < 2000 + k * 100; i++)
    s += i % (k + 3);
  return s;
}

int main() {
  std::vector<std::thread> threads;
  for (int t = 0; t < 9; t++)
    threads.emplace_back([t] {
      long s = 0;
      for (int r = 0; r < 20; r++) {
        s += work(t);
        std::lock_guard<std::mutex> g(lock);
        total += s;
      }
    });
  for (auto &t : threads)
    t.join();
  std::printf("%ld\n", total);
}
