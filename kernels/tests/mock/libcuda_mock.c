// A mock CUDA driver (libcuda.so) for kernels/tests/mock_driver.rs: the few
// entry points DeviceBuffer::alloc/write/read reach, with "device memory" in
// host memory and the one behaviour the test is about, as the CUDA Driver API
// documents it ("API synchronization behavior"): a cuMemcpyHtoD from pageable
// host memory returns once the bytes are in a staging buffer; the DMA to the
// destination is done later, on the legacy default stream. Here the staged
// copies land when the legacy stream is synchronized (cuStreamSynchronize of
// NULL or CU_STREAM_LEGACY), the context is synchronized, or a cuMemcpyDtoH
// (which waits for the legacy stream) runs. Nothing else of the driver is
// modelled. Built with soname libcuda.so so that the test's dlopen of it
// answers cudarc's dlopen("libcuda.so").
#include <stdlib.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;
typedef int CUresult;

struct Staged {
  CUdeviceptr dst;
  void* bytes;
  size_t n;
  struct Staged* next;
};
static struct Staged* staged;
static __thread void* current;
static int primary_ctx;

static void land(void) {
  while (staged) {
    struct Staged* s = staged;
    staged = s->next;
    memcpy((void*)s->dst, s->bytes, s->n);
    free(s->bytes);
    free(s);
  }
}

// How many staged copies have not landed (the test's probe).
unsigned fccl_mock_staged(void) {
  unsigned k = 0;
  for (struct Staged* s = staged; s; s = s->next) k++;
  return k;
}

CUresult cuInit(unsigned flags) { (void)flags; return 0; }
CUresult cuDriverGetVersion(int* v) { *v = 12090; return 0; }
CUresult cuDeviceGetCount(int* n) { *n = 1; return 0; }
CUresult cuDeviceGet(int* dev, int ordinal) {
  if (ordinal != 0) return 101;  // CUDA_ERROR_INVALID_DEVICE
  *dev = 0;
  return 0;
}
CUresult cuDeviceGetAttribute(int* v, int attr, int dev) {
  (void)attr;
  (void)dev;
  *v = 0;
  return 0;
}
CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) {
  (void)dev;
  *ctx = &primary_ctx;
  return 0;
}
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; return 0; }
CUresult cuCtxGetCurrent(void** ctx) { *ctx = current; return 0; }
CUresult cuCtxSetCurrent(void* ctx) { current = ctx; return 0; }
CUresult cuCtxSynchronize(void) { land(); return 0; }
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  void* m = malloc(n);
  if (!m) return 2;  // CUDA_ERROR_OUT_OF_MEMORY
  *p = (CUdeviceptr)m;
  return 0;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  land();
  free((void*)p);
  return 0;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  struct Staged* s = malloc(sizeof *s);
  s->bytes = malloc(n ? n : 1);
  memcpy(s->bytes, src, n);
  s->dst = dst;
  s->n = n;
  s->next = 0;
  struct Staged** at = &staged;  // land in issue order
  while (*at) at = &(*at)->next;
  *at = s;
  return 0;
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  land();
  memcpy(dst, (const void*)src, n);
  return 0;
}
CUresult cuStreamSynchronize(void* stream) {
  if (stream == 0 || stream == (void*)1) land();  // NULL or CU_STREAM_LEGACY
  return 0;
}
CUresult cuGetErrorName(CUresult e, const char** s) {
  (void)e;
  *s = "CUDA_ERROR_MOCK";
  return 0;
}
CUresult cuGetErrorString(CUresult e, const char** s) {
  (void)e;
  *s = "an error of the mock driver";
  return 0;
}
