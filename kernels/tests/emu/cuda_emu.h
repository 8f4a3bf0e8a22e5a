// GPU emulation for kernels.cu: runs the CUDA kernels on the host, one thread
// of the grid after another, so the kernel source and the launch planning are
// tested on machines without a GPU (kernels/tests/cuda_emulated.rs). This is a
// stand-in for a device, named as such: it checks indexing, vectorisation,
// alignment handling and arithmetic, not timing, memory model or the driver.
//
// Included before kernels.cu (c++ -include cuda_emu.h). Compile with
// -ffp-contract=off so that float adds and multiplies round separately, as
// __fadd_rn/__fmul_rn do on the device.
#define FCCL_EMULATION 1

#include <cstring>
#include <vector>

struct FcclDim3 {
  unsigned x;
};
static thread_local FcclDim3 threadIdx, blockIdx, blockDim, gridDim;

#define FCCL_DEV inline
#define FCCL_GLOBAL extern "C" void
#define FCCL_TID ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x)
#define FCCL_NTHREADS ((unsigned long long)gridDim.x * blockDim.x)

static inline float fccl_fadd(float a, float b) { volatile float r = a + b; return r; }
static inline float fccl_fmul(float a, float b) { volatile float r = a * b; return r; }
static inline double fccl_dadd(double a, double b) { volatile double r = a + b; return r; }
static inline double fccl_dmul(double a, double b) { volatile double r = a * b; return r; }
static inline unsigned fccl_f2u(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline float fccl_u2f(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline double fccl_u2d(unsigned long long u) { double d; std::memcpy(&d, &u, 8); return d; }

#define FCCL_FADD(a, b) fccl_fadd((a), (b))
#define FCCL_FMUL(a, b) fccl_fmul((a), (b))
#define FCCL_DADD(a, b) fccl_dadd((a), (b))
#define FCCL_DMUL(a, b) fccl_dmul((a), (b))
#define FCCL_F2U(x) fccl_f2u(x)
#define FCCL_U2F(x) fccl_u2f(x)
#define FCCL_U2D(x) fccl_u2d(x)

typedef void (*FcclKernel)(unsigned long long, unsigned long long, unsigned long long, unsigned long long,
                           unsigned long long, unsigned long long, unsigned long long, unsigned long long);

// Runs kernel `k` over a grid of `grid` blocks of `block` threads with the
// eight arguments in `args`, one thread after another, in the order `order`
// names: 0 forward; 1 reverse (a result that depends on the order means two
// threads touch one element); any other value seeds a shuffled block order
// (Fisher-Yates, xorshift64), each block's threads in reverse, as a device
// that schedules blocks in any order and not one launch's blocks after
// another's would.
extern "C" void fccl_emu_launch(FcclKernel k, unsigned grid, unsigned block, const unsigned long long* args,
                                int order) {
  gridDim.x = grid;
  blockDim.x = block;
  std::vector<unsigned> blocks(grid);
  for (unsigned g = 0; g < grid; g++) blocks[g] = order == 1 ? grid - 1 - g : g;
  if (order > 1) {
    unsigned long long s = 0x9e3779b97f4a7c15ull ^ (unsigned long long)order;
    for (unsigned g = grid; g > 1; g--) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      unsigned j = (unsigned)(s % g);
      unsigned t = blocks[g - 1];
      blocks[g - 1] = blocks[j];
      blocks[j] = t;
    }
  }
  for (unsigned g = 0; g < grid; g++) {
    blockIdx.x = blocks[g];
    for (unsigned i = 0; i < block; i++) {
      threadIdx.x = order == 0 ? i : block - 1 - i;
      k(args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7]);
    }
  }
}
