/*
 * A test profiler plugin in C shaped like NCCL's example profiler
 * (plugins/profiler/example in NVIDIA/nccl): ncclProfiler_v6, events timed on
 * the CPU, copy-engine collective events timed with CUDA events
 * (cudaEventCreateWithFlags / cudaEventRecord / cudaEventQuery /
 * cudaEventElapsedTime / cudaEventDestroy), and - like the example's Makefile -
 * built with -shared only, NOT linked against libcudart: those symbols must come
 * from the host process. Written from the layout tables of
 * docs/reference/nccl-plugin-abi.md section 3.2, not from ferroccl's Rust
 * definitions.
 *
 * Test hook: ferroccl_test_profiler_cuda(results, n) reports what the CUDA calls
 * of the last copy-engine event returned.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum { ncclSuccess = 0, ncclSystemError = 2, ncclInternalError = 3, ncclInvalidArgument = 4 } ncclResult_t;
typedef void (*ncclDebugLogger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

/* CUDA runtime API as the example uses it (normally from cuda_runtime.h). */
typedef int cudaError_t;
typedef void* cudaEvent_t;
typedef void* cudaStream_t;
#define cudaSuccess 0
#define cudaEventDisableTiming 0x02
extern cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags);
extern cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
extern cudaError_t cudaEventQuery(cudaEvent_t event);
extern cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
extern cudaError_t cudaEventDestroy(cudaEvent_t event);

#define ncclProfileColl (1ULL << 1)
#define ncclProfileP2p (1ULL << 2)
#define ncclProfileCeColl (1ULL << 12)

/* ncclProfilerEventDescr_v6_t: type (u64) at 0, parentObj at 8, rank at 16, a
 * union at 24; 112 bytes. This plugin only reads the type. */
typedef struct {
  uint64_t type;
  void* parentObj;
  int rank;
  unsigned char u[88];
} ncclProfilerEventDescr_v6_t;
_Static_assert(sizeof(ncclProfilerEventDescr_v6_t) == 112, "ncclProfilerEventDescr_v6_t is 112 bytes");

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v6_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, int eState, void* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v6_t;
_Static_assert(sizeof(ncclProfiler_v6_t) == 48, "ncclProfiler_v6_t is 48 bytes");

struct ctx {
  uint64_t commId;
  int rank;
  int events;
  ncclDebugLogger_t log;
};

struct event {
  uint64_t type;
  double cpuStart, cpuStop;
  cudaEvent_t start, stop;
};

/* CUDA results of the last copy-engine event: create, record start, record stop, query, elapsed, destroy. */
static int g_cuda[6] = {-1, -1, -1, -1, -1, -1};
static int g_cuda_events_created = 0;

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static ncclResult_t pInit(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                          int nranks, int rank, ncclDebugLogger_t logfn) {
  (void)commName;
  (void)nNodes;
  (void)nranks;
  struct ctx* c = calloc(1, sizeof *c);
  if (!c) return ncclSystemError;
  c->commId = commId;
  c->rank = rank;
  c->log = logfn;
  *eActivationMask = (int)(ncclProfileColl | ncclProfileP2p | ncclProfileCeColl);
  if (logfn) logfn(3, 0x1, __func__, __LINE__, "PROFILER/CudaEvents: init commId %lu rank %d", commId, rank);
  *context = c;
  return ncclSuccess;
}

static ncclResult_t pStartEvent(void* context, void** eHandle, ncclProfilerEventDescr_v6_t* eDescr) {
  struct ctx* c = (struct ctx*)context;
  *eHandle = NULL;
  if (c == NULL || eDescr == NULL) return ncclSuccess;
  if (!(eDescr->type & (ncclProfileColl | ncclProfileP2p | ncclProfileCeColl))) return ncclSuccess;
  struct event* e = calloc(1, sizeof *e);
  if (!e) return ncclSystemError;
  e->type = eDescr->type;
  e->cpuStart = now_us();
  if (e->type == ncclProfileCeColl) {
    /* As the example's CE path: create events, record the start on the op's stream. */
    g_cuda[0] = cudaEventCreateWithFlags(&e->start, cudaEventDisableTiming);
    (void)cudaEventCreateWithFlags(&e->stop, cudaEventDisableTiming);
    if (e->start != NULL) g_cuda_events_created++;
    g_cuda[1] = cudaEventRecord(e->start, NULL);
  }
  c->events++;
  *eHandle = e;
  return ncclSuccess;
}

static ncclResult_t pStopEvent(void* eHandle) {
  struct event* e = (struct event*)eHandle;
  if (e == NULL) return ncclSuccess;
  e->cpuStop = now_us();
  if (e->type == ncclProfileCeColl) {
    g_cuda[2] = cudaEventRecord(e->stop, NULL);
    /* The example's poller: the GPU timing completes only when the query succeeds. */
    g_cuda[3] = cudaEventQuery(e->stop);
    float ms = -1;
    g_cuda[4] = cudaEventElapsedTime(&ms, e->start, e->stop);
    g_cuda[5] = cudaEventDestroy(e->start);
    (void)cudaEventDestroy(e->stop);
  }
  free(e);
  return ncclSuccess;
}

static ncclResult_t pRecordEventState(void* eHandle, int eState, void* eStateArgs) {
  (void)eHandle;
  (void)eState;
  (void)eStateArgs;
  return ncclSuccess;
}

static ncclResult_t pFinalize(void* context) {
  struct ctx* c = (struct ctx*)context;
  if (c == NULL) return ncclSuccess;
  if (c->log) c->log(3, 0x1, __func__, __LINE__, "PROFILER/CudaEvents: finalize after %d events", c->events);
  free(c);
  return ncclSuccess;
}

__attribute__((visibility("default"))) const ncclProfiler_v6_t ncclProfiler_v6 = {
    .name = "CudaEvents",
    .init = pInit,
    .startEvent = pStartEvent,
    .stopEvent = pStopEvent,
    .recordEventState = pRecordEventState,
    .finalize = pFinalize,
};

/* Test hook: copies up to n of the CUDA results of the last copy-engine event
 * (create, record start, record stop, query, elapsed time, destroy) into
 * results; returns how many CUDA events were really created. */
__attribute__((visibility("default"))) int ferroccl_test_profiler_cuda(int* results, int n) {
  for (int i = 0; i < n && i < 6; i++) results[i] = g_cuda[i];
  return g_cuda_events_created;
}
