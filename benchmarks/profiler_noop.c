/* A profiler plugin that does nothing (ncclProfiler_v6, every event enabled):
 * benchmarks/profiler_overhead.sh's "noopall" mode, which measures what the
 * host itself spends emitting NCCL's profiler events (building descriptors,
 * tracking steps, one indirect call per start/stop/state), apart from any
 * plugin's own work. Layout and signatures: NCCL 2.30.7
 * src/include/plugin/profiler/profiler_v6.h (ncclProfiler_v6_t, 48 bytes).
 * Built with -DSTAMP (the "stampall" mode), every start, stop and state
 * also reads the TSC and stores (handle, state, time) in the calling thread's
 * ring of 16-byte slots, allocated once per thread and never grown: the least
 * any timestamping profiler must do per call, a floor no trace can beat on the
 * machine it runs on.
 * Build: cc -O2 -shared -fPIC -o libnccl-profiler-noop.so profiler_noop.c
 *        cc -O2 -shared -fPIC -DSTAMP -o libnccl-profiler-stamp.so profiler_noop.c */
#include <stdint.h>
#ifdef STAMP
#include <stdlib.h>
#include <x86intrin.h>
typedef struct { void* handle; uint32_t state; uint32_t time; } stamp_t;
enum { RING = 1 << 16 }; /* slots per thread: 1 MiB, touched once at creation */
/* initial-exec: a %fs-relative load, no __tls_get_addr call (glibc keeps
 * static TLS to spare for dlopen'ed libraries; 12 bytes fit) */
static __thread __attribute__((tls_model("initial-exec"))) stamp_t* ring;
static __thread __attribute__((tls_model("initial-exec"))) uint32_t pos;
static void stamp(void* handle, int state) {
  if (__builtin_expect(ring == NULL, 0)) {
    ring = calloc(RING, sizeof(stamp_t));
    if (ring == NULL) return;
    for (uint32_t i = 0; i < RING; i += 256) ring[i].state = 1; /* fault every page in now */
  }
  stamp_t* s = &ring[pos++ & (RING - 1)];
  s->handle = handle;
  s->state = (uint32_t)state;
  s->time = (uint32_t)__rdtsc();
}
#define STAMP_CALL(h, st) stamp((h), (st))
#else
#define STAMP_CALL(h, st) ((void)(h), (void)(st))
#endif

static int token; /* the context and every event handle: non-NULL, never read */

static int noop_init(void** context, uint64_t comm_id, int* activation_mask, const char* comm_name,
                     int n_nodes, int n_ranks, int rank, void* logfn) {
  (void)comm_id; (void)comm_name; (void)n_nodes; (void)n_ranks; (void)rank; (void)logfn;
  *context = &token;
  *activation_mask = 0x7fff; /* every event type of v6 */
  return 0;
}
static int noop_start(void* context, void** handle, void* descr) {
  (void)context; (void)descr;
  *handle = &token;
  STAMP_CALL(handle, -1);
  return 0;
}
static int noop_stop(void* handle) { STAMP_CALL(handle, -2); return 0; }
static int noop_record(void* handle, int state, void* args) { (void)args; STAMP_CALL(handle, state); return 0; }
static int noop_finalize(void* context) { (void)context; return 0; }

typedef struct {
  const char* name;
  void* init;
  void* startEvent;
  void* stopEvent;
  void* recordEventState;
  void* finalize;
} noop_profiler_t;
_Static_assert(sizeof(noop_profiler_t) == 48, "ncclProfiler_v6_t is 48 bytes");

__attribute__((visibility("default"))) const noop_profiler_t ncclProfiler_v6 = {
  "Noop", (void*)noop_init, (void*)noop_start, (void*)noop_stop, (void*)noop_record, (void*)noop_finalize,
};
