/* The floor of a 2-rank 8-byte exchange through shared memory on this machine
 * (BENCHMARKS.md §5.2): two processes pinned to CPUs 0 and 1 each send a
 * 72-byte step (a 64-byte header and 8 bytes) to the other and wait for the
 * other's, in lockstep, as a 2-rank 8-byte AllReduce does; no library code.
 *
 * Modes:
 *   0  the shm transport's Simple shape: the sender reads the receiver's head
 *      before every step, writes the slot, then publishes tail; the receiver
 *      polls tail (its own line), then reads the slot, then returns head;
 *   1  as 0, with the head read only once half the FIFO is in flight;
 *   2  data and flag in one line: 56 bytes and a sequence word per 64-byte
 *      line (the receiver polls the line itself), head as in 1.
 *
 * Build: gcc -O2 -o /tmp/shm_exchange benchmarks/shm_exchange.c
 * Run:   /tmp/shm_exchange MODE ITERS     (e.g. /tmp/shm_exchange 1 300000)
 * Prints microseconds per exchange. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { STEPS = 8, SLOT = 4096, STEP_BYTES = 72 };

typedef struct {
  volatile uint64_t tail;
  char pad0[56];
  volatile uint64_t head;
  char pad1[56];
  char slots[STEPS][SLOT];
} seg_t;

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODE(0|1|2) ITERS\n", argv[0]);
    return 2;
  }
  int mode = atoi(argv[1]);
  long iters = atol(argv[2]);
  const long warmup = 1000;
  seg_t *s = mmap(0, 2 * sizeof(seg_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (s == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  memset(s, 0, 2 * sizeof(seg_t));
  pid_t child = fork();
  int me = child == 0 ? 1 : 0;
  cpu_set_t c;
  CPU_ZERO(&c);
  CPU_SET(me, &c);
  sched_setaffinity(0, sizeof c, &c);
  seg_t *out = &s[1 - me], *in = &s[me];
  uint64_t head_seen = 0, acc = 0;
  double t0 = 0;
  for (uint64_t step = 0; step < (uint64_t)(iters + warmup); step++) {
    if (step == (uint64_t)warmup) t0 = now_us();
    /* send */
    if (mode == 0 || step - head_seen >= STEPS / 2)
      do head_seen = __atomic_load_n(&out->head, __ATOMIC_ACQUIRE);
      while (step - head_seen >= STEPS);
    uint64_t *w = (uint64_t *)out->slots[step % STEPS];
    if (mode < 2) {
      for (int k = 0; k < STEP_BYTES / 8; k++) w[k] = step + k;
      __atomic_store_n(&out->tail, step + 1, __ATOMIC_RELEASE);
    } else {
      for (int k = 0; k < 7; k++) w[k] = step + k;
      for (int k = 8; k < 15; k++) w[k] = step + k;
      __atomic_store_n(&w[7], step + 1, __ATOMIC_RELEASE);
      __atomic_store_n(&w[15], step + 1, __ATOMIC_RELEASE);
    }
    /* receive */
    uint64_t *r = (uint64_t *)in->slots[step % STEPS];
    if (mode < 2) {
      while (__atomic_load_n(&in->tail, __ATOMIC_ACQUIRE) <= step) {
      }
      acc += r[0] + r[8];
    } else {
      while (__atomic_load_n(&r[7], __ATOMIC_ACQUIRE) != step + 1 ||
             __atomic_load_n(&r[15], __ATOMIC_ACQUIRE) != step + 1) {
      }
      acc += r[0] + r[8];
    }
    __atomic_store_n(&in->head, step + 1, __ATOMIC_RELEASE);
  }
  double us = (now_us() - t0) / iters;
  if (me == 0) {
    printf("mode %d: %.3f us per exchange (checksum %llu)\n", mode, us, (unsigned long long)(acc & 0xffff));
    waitpid(child, NULL, 0);
  }
  return 0;
}
