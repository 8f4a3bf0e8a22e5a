/*
 * ferroccl's stand-in for the few CUDA runtime entry points that NCCL profiler
 * plugins call without linking libcudart (NCCL's own example profiler,
 * plugins/profiler/example in NVIDIA/nccl, times copy-engine collectives with
 * cudaEvent* and is built with -shared only: it relies on the application's
 * libcudart being in the global symbol scope; see
 * docs/reference/nccl-graph-tuning.md section 6.8).
 *
 * The host (core/src/plugin/cuda_stub.rs) compiles this file into a small shared
 * object embedded in the runtime and loads it RTLD_GLOBAL only when a profiler
 * plugin fails to load for want of these symbols and no CUDA runtime is loaded.
 *
 * Behaviour: what the real CUDA runtime gives on a machine without a GPU.
 * Every call returns cudaErrorNoDevice (100) and creates nothing: events are
 * NULL, elapsed times 0, error strings say so. A profiler therefore never sees a
 * GPU timing complete, exactly as NCCL's users see when no GPU work is timed
 * (the example profiler only creates CUDA events for copy-engine collectives,
 * which a host without GPUs never runs).
 */
#include <stddef.h>

typedef int cudaError_t;
typedef void* cudaEvent_t;
typedef void* cudaStream_t;

#define CUDA_ERROR_NO_DEVICE 100

#define EXPORT __attribute__((visibility("default")))

EXPORT cudaError_t cudaEventCreate(cudaEvent_t* event) {
  if (event) *event = NULL;
  return CUDA_ERROR_NO_DEVICE;
}

EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  (void)flags;
  if (event) *event = NULL;
  return CUDA_ERROR_NO_DEVICE;
}

EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  (void)event;
  (void)stream;
  return CUDA_ERROR_NO_DEVICE;
}

EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  (void)event;
  (void)stream;
  (void)flags;
  return CUDA_ERROR_NO_DEVICE;
}

EXPORT cudaError_t cudaEventQuery(cudaEvent_t event) {
  (void)event;
  return CUDA_ERROR_NO_DEVICE;
}

EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  (void)event;
  return CUDA_ERROR_NO_DEVICE;
}

EXPORT cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  (void)start;
  (void)end;
  if (ms) *ms = 0.0f;
  return CUDA_ERROR_NO_DEVICE;
}

/* CUDA 12.8+ headers may map cudaEventElapsedTime to this name. */
EXPORT cudaError_t cudaEventElapsedTime_v2(float* ms, cudaEvent_t start, cudaEvent_t end) {
  return cudaEventElapsedTime(ms, start, end);
}

EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event) {
  (void)event;
  return CUDA_ERROR_NO_DEVICE;
}

EXPORT cudaError_t cudaGetLastError(void) { return CUDA_ERROR_NO_DEVICE; }

EXPORT cudaError_t cudaPeekAtLastError(void) { return CUDA_ERROR_NO_DEVICE; }

EXPORT const char* cudaGetErrorString(cudaError_t error) {
  return error == 0 ? "no error"
                    : "no CUDA-capable device is detected (ferroccl's CUDA runtime stand-in: no CUDA runtime is loaded)";
}

EXPORT const char* cudaGetErrorName(cudaError_t error) {
  return error == 0 ? "cudaSuccess" : "cudaErrorNoDevice";
}
