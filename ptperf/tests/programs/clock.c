/* Reads the monotonic clock a few times: calls into the vDSO (code in no
 * file), statically linked to stay short. */
#include <time.h>

int main(void) {
  struct timespec ts;
  long sum = 0;
  for (int i = 0; i < 3; i++) {
    clock_gettime(CLOCK_MONOTONIC, &ts);
    sum += ts.tv_nsec & 1;
  }
  return sum > 3;
}
