/* cudaStream_t: CUDA's own definition where cuda_runtime.h is on the include
 * path; otherwise the same type declared here (a program that includes
 * cuda_runtime.h later gets an identical, compatible typedef). NULL is the
 * default stream; on a machine without CUDA, NULL is the only stream and the
 * buffers are host memory (a ferroccl extension). */
#if defined(__has_include) && !defined(FERROCCL_NO_CUDA_RUNTIME_H)
#if __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
#define FERROCCL_HAVE_CUDA_RUNTIME_H 1
#endif
#endif
#ifndef FERROCCL_HAVE_CUDA_RUNTIME_H
typedef struct CUstream_st* cudaStream_t;
#endif

#define NCCL_SUFFIX ""
#define NCCL_VERSION(X,Y,Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))

#define NCCL_COMM_NULL NULL
/* ncclConfig_t.magic as NCCL_CONFIG_INITIALIZER sets it (src/abi.rs NCCL_API_MAGIC). */
#define NCCL_API_MAGIC 0xcafebeef
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_UNDEF_FLOAT -1.0f

