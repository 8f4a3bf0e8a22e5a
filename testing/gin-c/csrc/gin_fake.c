/*
 * A fake GIN (GPU-initiated networking) plugin for the conformance suite's GIN
 * section: one GIN_PROXY device, host-side calls only. Layouts written from NCCL
 * 2.30.7's src/include/plugin/gin/gin_v13.h, gin_v14.h and net/net_v12.h (x86-64 /
 * aarch64 Linux, LP64), pinned below.
 *
 * GIN_FAULT_HOST_TYPE: getProperties reports NCCL_NET_DEVICE_HOST (0) as the
 * device type, which NCCL's ncclGinPluginAssignToComm would take as the GIN type.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int ncclResult_t;
#define ncclSuccess 0
#define ncclInternalError 3
#define ncclInvalidArgument 4
#define ncclSystemError 2

typedef void (*ncclDebugLogger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

typedef struct {
  int ndevs;
  int devs[8];
} vprops_v12_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
  vprops_v12_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  short railId;
  short planeId;
} props_v12_t;

typedef struct {
  bool supportsStrongSignals;
  bool supportsVASignals;
} gin_props_v14_t;

typedef ncclResult_t (*opaque_t)(void);

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, props_v12_t* props);
  opaque_t listen, connect, createContext, regMrSym, regMrSymDmaBuf, deregMrSym, destroyContext, closeColl,
      closeListen, iput, iputSignal, iget, iflush, test, ginProgress, queryLastError;
  ncclResult_t (*finalize)(void* ctx);
} gin_v13_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getGinProperties)(gin_props_v14_t* props);
  ncclResult_t (*getProperties)(int dev, props_v12_t* props);
  opaque_t listen, connect, createContext, regMrSym, regMrSymDmaBuf, deregMrSym, destroyContext, closeColl,
      closeListen, ginProgress, queryLastError;
  ncclResult_t (*finalize)(void* ctx);
} gin_v14_t;

_Static_assert(sizeof(props_v12_t) == 128, "ncclNetProperties_v12_t is 128 bytes");
_Static_assert(offsetof(props_v12_t, netDeviceType) == 56, "netDeviceType at 56");
_Static_assert(offsetof(props_v12_t, vProps) == 64, "vProps at 64");
_Static_assert(sizeof(gin_v13_t) == 168, "ncclGin_v13_t is 168 bytes");
_Static_assert(offsetof(gin_v13_t, getProperties) == 24, "v13 getProperties at 24");
_Static_assert(offsetof(gin_v13_t, iput) == 104, "v13 iput at 104");
_Static_assert(offsetof(gin_v13_t, finalize) == 160, "v13 finalize at 160");
_Static_assert(sizeof(gin_v14_t) == 136, "ncclGin_v14_t is 136 bytes");
_Static_assert(offsetof(gin_v14_t, getGinProperties) == 24, "v14 getGinProperties at 24");
_Static_assert(offsetof(gin_v14_t, getProperties) == 32, "v14 getProperties at 32");
_Static_assert(offsetof(gin_v14_t, finalize) == 128, "v14 finalize at 128");

#define CTX_MAGIC 0x66616b6567696e21ULL /* "fakegin!" */

static ncclResult_t fake_init(void** ctx, uint64_t commId, ncclDebugLogger_t logFunction) {
  if (ctx == NULL) return ncclInvalidArgument;
  uint64_t* c = malloc(2 * sizeof(uint64_t));
  if (c == NULL) return ncclSystemError;
  c[0] = CTX_MAGIC;
  c[1] = commId;
  if (logFunction) logFunction(3 /* NCCL_LOG_INFO */, 0x10 /* NCCL_NET */, __FILE__, __LINE__, "FakeGin init comm %lx", (unsigned long)commId);
  *ctx = c;
  return ncclSuccess;
}

static ncclResult_t fake_finalize(void* ctx) {
  uint64_t* c = ctx;
  if (c == NULL || c[0] != CTX_MAGIC) return ncclInvalidArgument;
  c[0] = 0;
  free(c);
  return ncclSuccess;
}

static ncclResult_t fake_devices(int* ndev) {
  if (ndev == NULL) return ncclInvalidArgument;
  *ndev = 1;
  return ncclSuccess;
}

static ncclResult_t fake_get_properties(int dev, props_v12_t* props) {
  if (dev != 0 || props == NULL) return ncclInvalidArgument;
  memset(props, 0, sizeof(*props));
  props->name = (char*)"fakegin0";
  props->ptrSupport = 1;
  props->speed = 100000;
  props->latency = 0;
  props->maxComms = 1024;
  props->maxRecvs = 1;
#ifdef GIN_FAULT_HOST_TYPE
  props->netDeviceType = 0; /* NCCL_NET_DEVICE_HOST: not a GIN type */
#else
  props->netDeviceType = 2; /* NCCL_NET_DEVICE_GIN_PROXY */
#endif
  props->netDeviceVersion = 1;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = 0;
  props->maxP2pBytes = (size_t)1 << 31;
  props->maxCollBytes = (size_t)1 << 31;
  props->maxMultiRequestSize = 1;
  return ncclSuccess;
}

static ncclResult_t fake_get_gin_properties(gin_props_v14_t* props) {
  if (props == NULL) return ncclInvalidArgument;
  props->supportsStrongSignals = true;
  props->supportsVASignals = false;
  return ncclSuccess;
}

static ncclResult_t fake_unsupported(void) { return ncclInternalError; }

#define OPAQUE (opaque_t) fake_unsupported

__attribute__((visibility("default"))) const gin_v13_t ncclGinPlugin_v13 = {
    .name = "FakeGin",
    .init = fake_init,
    .devices = fake_devices,
    .getProperties = fake_get_properties,
    .listen = OPAQUE, .connect = OPAQUE, .createContext = OPAQUE, .regMrSym = OPAQUE, .regMrSymDmaBuf = OPAQUE,
    .deregMrSym = OPAQUE, .destroyContext = OPAQUE, .closeColl = OPAQUE, .closeListen = OPAQUE, .iput = OPAQUE,
    .iputSignal = OPAQUE, .iget = OPAQUE, .iflush = OPAQUE, .test = OPAQUE, .ginProgress = NULL,
    .queryLastError = OPAQUE,
    .finalize = fake_finalize,
};

__attribute__((visibility("default"))) const gin_v14_t ncclGinPlugin_v14 = {
    .name = "FakeGin",
    .init = fake_init,
    .devices = fake_devices,
    .getGinProperties = fake_get_gin_properties,
    .getProperties = fake_get_properties,
    .listen = OPAQUE, .connect = OPAQUE, .createContext = OPAQUE, .regMrSym = OPAQUE, .regMrSymDmaBuf = OPAQUE,
    .deregMrSym = OPAQUE, .destroyContext = OPAQUE, .closeColl = OPAQUE, .closeListen = OPAQUE, .ginProgress = NULL,
    .queryLastError = OPAQUE,
    .finalize = fake_finalize,
};
