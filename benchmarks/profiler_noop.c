/* A profiler plugin that does nothing (ncclProfiler_v6, every event enabled):
 * benchmarks/profiler_overhead.sh's "noopall" mode, which measures what the
 * host itself spends emitting NCCL's profiler events (building descriptors,
 * tracking steps, one indirect call per start/stop/state), apart from any
 * plugin's own work. Layout and signatures: NCCL 2.30.7
 * src/include/plugin/profiler/profiler_v6.h (ncclProfiler_v6_t, 48 bytes).
 * Build: cc -O2 -shared -fPIC -o libnccl-profiler-noop.so profiler_noop.c */
#include <stdint.h>

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
  return 0;
}
static int noop_stop(void* handle) { (void)handle; return 0; }
static int noop_record(void* handle, int state, void* args) { (void)handle; (void)state; (void)args; return 0; }
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
