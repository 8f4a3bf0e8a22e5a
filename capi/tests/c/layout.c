/* The generated nccl.h against NCCL 2.30.7's layout (LP64): struct sizes and
 * offsets, enum values, macros. Compiled as C11 (and as C++ when a C++
 * compiler is present); a failed check is a compile error. Running it prints
 * the numbers the Rust side asserts too (src/abi.rs). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "nccl.h"

#ifdef __cplusplus
#define SA static_assert
#else
#define SA _Static_assert
#endif

SA(sizeof(ncclUniqueId) == 128 && NCCL_UNIQUE_ID_BYTES == 128, "ncclUniqueId");
SA(sizeof(ncclConfig_t) == 96, "ncclConfig_t size");
SA(offsetof(ncclConfig_t, size) == 0, "size");
SA(offsetof(ncclConfig_t, magic) == 8, "magic");
SA(offsetof(ncclConfig_t, version) == 12, "version");
SA(offsetof(ncclConfig_t, blocking) == 16, "blocking");
SA(offsetof(ncclConfig_t, cgaClusterSize) == 20, "cgaClusterSize");
SA(offsetof(ncclConfig_t, minCTAs) == 24, "minCTAs");
SA(offsetof(ncclConfig_t, maxCTAs) == 28, "maxCTAs");
SA(offsetof(ncclConfig_t, netName) == 32, "netName");
SA(offsetof(ncclConfig_t, splitShare) == 40, "splitShare");
SA(offsetof(ncclConfig_t, trafficClass) == 44, "trafficClass");
SA(offsetof(ncclConfig_t, commName) == 48, "commName");
SA(offsetof(ncclConfig_t, collnetEnable) == 56, "collnetEnable");
SA(offsetof(ncclConfig_t, CTAPolicy) == 60, "CTAPolicy");
SA(offsetof(ncclConfig_t, shrinkShare) == 64, "shrinkShare");
SA(offsetof(ncclConfig_t, nvlsCTAs) == 68, "nvlsCTAs");
SA(offsetof(ncclConfig_t, nChannelsPerNetPeer) == 72, "nChannelsPerNetPeer");
SA(offsetof(ncclConfig_t, nvlinkCentricSched) == 76, "nvlinkCentricSched");
SA(offsetof(ncclConfig_t, graphUsageMode) == 80, "graphUsageMode");
SA(offsetof(ncclConfig_t, numRmaCtx) == 84, "numRmaCtx");
SA(offsetof(ncclConfig_t, maxP2pPeers) == 88, "maxP2pPeers");
SA(offsetof(ncclConfig_t, graphStreamOrdering) == 92, "graphStreamOrdering");
SA(sizeof(ncclSimInfo_t) == 24 && offsetof(ncclSimInfo_t, estimatedTime) == 16, "ncclSimInfo_t");
SA(sizeof(ncclWaitSignalDesc_t) == 16 && offsetof(ncclWaitSignalDesc_t, ctx) == 12, "ncclWaitSignalDesc_t");
SA(sizeof(ncclResult_t) == 4 && sizeof(ncclDataType_t) == 4 && sizeof(ncclRedOp_t) == 4, "enum sizes");
SA(ncclSuccess == 0 && ncclInvalidArgument == 4 && ncclInvalidUsage == 5 && ncclRemoteError == 6 &&
       ncclInProgress == 7 && ncclTimeout == 8 && ncclNumResults == 9,
   "ncclResult_t");
SA(ncclInt8 == 0 && ncclChar == 0 && ncclUint8 == 1 && ncclInt32 == 2 && ncclInt == 2 && ncclUint32 == 3 &&
       ncclInt64 == 4 && ncclUint64 == 5 && ncclFloat16 == 6 && ncclHalf == 6 && ncclFloat32 == 7 &&
       ncclFloat == 7 && ncclFloat64 == 8 && ncclDouble == 8 && ncclBfloat16 == 9 && ncclFloat8e4m3 == 10 &&
       ncclFloat8e5m2 == 11 && ncclNumTypes == 12,
   "ncclDataType_t");
SA(ncclSum == 0 && ncclProd == 1 && ncclMax == 2 && ncclMin == 3 && ncclAvg == 4 && ncclNumOps == 5 &&
       ncclMaxRedOp == 0x7fffffff,
   "ncclRedOp_t");
SA(ncclScalarDevice == 0 && ncclScalarHostImmediate == 1, "ncclScalarResidence_t");
SA(NCCL_MAJOR == 2 && NCCL_MINOR == 30 && NCCL_PATCH == 7, "version macros");
SA(NCCL_VERSION_CODE == 23007 && NCCL_VERSION(2, 30, 7) == 23007 && NCCL_VERSION(2, 8, 4) == 2804, "NCCL_VERSION");
SA(NCCL_SPLIT_NOCOLOR == -1 && NCCL_API_MAGIC == 0xcafebeef, "macros");

int main(void) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  ncclSimInfo_t s = NCCL_SIM_INFO_INITIALIZER;
  if (c.size != sizeof(ncclConfig_t) || c.magic != NCCL_API_MAGIC || c.version != NCCL_VERSION_CODE ||
      c.blocking != NCCL_CONFIG_UNDEF_INT || c.netName != NULL || c.graphStreamOrdering != NCCL_CONFIG_UNDEF_INT ||
      s.size != sizeof(ncclSimInfo_t) || s.estimatedTime != NCCL_UNDEF_FLOAT) {
    fprintf(stderr, "initializers are wrong\n");
    return 1;
  }
  cudaStream_t stream = NULL;
  ncclComm_t comm = NCCL_COMM_NULL;
  (void)stream;
  (void)comm;
  printf("layout ok: sizeof(ncclConfig_t)=%zu sizeof(ncclUniqueId)=%zu NCCL_VERSION_CODE=%d %s\n",
         sizeof(ncclConfig_t), sizeof(ncclUniqueId), NCCL_VERSION_CODE, NCCL_SUFFIX);
  return 0;
}
