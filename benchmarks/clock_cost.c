/* What one timestamp costs on this machine (BENCHMARKS.md §8.11): the TSC
 * (rdtsc, what benchmarks/profiler_noop.c -DSTAMP and the trace profiler
 * read where the TSC can be trusted) against clock_gettime(CLOCK_REALTIME)
 * and CLOCK_MONOTONIC (the trace profiler's fallback; through the vDSO when
 * the kernel's clocksource allows it, else a system call). Also prints the
 * CPU flags and the clocksource that decide which one a profiler can use.
 * Build and run: cc -O2 -o /tmp/clock_cost benchmarks/clock_cost.c && /tmp/clock_cost [N] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <x86intrin.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void show_file(const char* label, const char* path) {
  char buf[256] = {0};
  FILE* f = fopen(path, "r");
  if (f == NULL) {
    printf("%s: (unreadable)\n", label);
    return;
  }
  if (fgets(buf, sizeof buf, f) == NULL) buf[0] = 0;
  fclose(f);
  buf[strcspn(buf, "\n")] = 0;
  printf("%s: %s\n", label, buf);
}

int main(int argc, char** argv) {
  long n = argc > 1 ? atol(argv[1]) : 5000000;
  char line[8192];
  FILE* f = fopen("/proc/cpuinfo", "r");
  while (f != NULL && fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, "model name", 10) == 0) printf("%s", line);
    if (strncmp(line, "flags", 5) == 0) {
      static const char* want[] = {"constant_tsc", "nonstop_tsc", "tsc_known_freq", "hypervisor", "rdtscp"};
      printf("tsc flags:");
      for (unsigned i = 0; i < sizeof want / sizeof *want; i++) {
        char pat[64];
        snprintf(pat, sizeof pat, " %s", want[i]);
        const char* p = strstr(line, pat);
        int ok = p != NULL && (p[strlen(pat)] == ' ' || p[strlen(pat)] == '\n');
        printf(" %s=%d", want[i], ok);
      }
      printf("\n");
      break;
    }
  }
  if (f != NULL) fclose(f);
  show_file("clocksource", "/sys/devices/system/clocksource/clocksource0/current_clocksource");
  show_file("available", "/sys/devices/system/clocksource/clocksource0/available_clocksource");
  volatile uint64_t sink = 0;
  for (int round = 0; round < 3; round++) {
    double t0 = now_s();
    for (long i = 0; i < n; i++) sink += __rdtsc();
    double t1 = now_s();
    struct timespec ts;
    for (long i = 0; i < n; i++) {
      clock_gettime(CLOCK_REALTIME, &ts);
      sink += (uint64_t)ts.tv_nsec;
    }
    double t2 = now_s();
    for (long i = 0; i < n; i++) {
      clock_gettime(CLOCK_MONOTONIC, &ts);
      sink += (uint64_t)ts.tv_nsec;
    }
    double t3 = now_s();
    printf("ns per read: rdtsc %.1f  CLOCK_REALTIME %.1f  CLOCK_MONOTONIC %.1f\n", (t1 - t0) * 1e9 / n,
           (t2 - t1) * 1e9 / n, (t3 - t2) * 1e9 / n);
  }
  return sink == 42;
}
