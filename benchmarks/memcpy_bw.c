/* Single-thread memcpy bandwidth on this machine, the yardstick for the memory
 * bandwidth the shared-memory transport uses (issue 15, BENCHMARKS.md section 5):
 * best of 5 rounds of memcpy between two page-aligned buffers of 1, 4 and 64 MiB
 * (1 and 4 MiB stay in the 32 MiB L3, 64 MiB goes to DRAM), reported as bytes
 * copied per second and as bytes read + written per second.
 * Build and run: gcc -O2 -o /tmp/memcpy_bw benchmarks/memcpy_bw.c && /tmp/memcpy_bw */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
  size_t sizes[] = {1u << 20, 4u << 20, 64u << 20};
  for (int k = 0; k < 3; k++) {
    size_t n = sizes[k];
    char *a = aligned_alloc(4096, n), *b = aligned_alloc(4096, n);
    if (!a || !b) return 1;
    memset(a, 1, n);
    memset(b, 2, n);
    int iters = (int)((1ull << 30) / n);
    if (iters < 4) iters = 4;
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
      double t0 = now();
      for (int i = 0; i < iters; i++) {
        memcpy(b, a, n);
        __asm__ volatile("" ::"r"(b) : "memory");
      }
      double dt = (now() - t0) / iters;
      if (dt < best) best = dt;
    }
    printf("memcpy %6zu KiB: %6.2f GB/s copied, %6.2f GB/s read+written\n", n >> 10, n / best / 1e9,
           2 * n / best / 1e9);
    free(a);
    free(b);
  }
  return 0;
}
