/*
 * ncclNet_v12 face of the zoo plugin (included by zoo_net.c with ZOO_STANDALONE and
 * ZOO_EXPORT_V12): the v12 table, written by hand from the layout tables of
 * docs/reference/nccl-plugin-abi.md section 1.2/1.3 (offsets checked below),
 * whose slots wrap the v8 implementation. v12 semantics: init(ctx) once per
 * communicator, finalize(ctx) per communicator (mandatory), listen/connect take
 * the context.
 *
 * With ZOO_FAULT_TRAFFIC_CLASS (broken) init refuses a config with a defined
 * trafficClass; the conformance check conn.traffic_class catches it.
 *
 * With ZOO_QUIRK_CTX_TEARDOWN the plugin tears itself down when its last context
 * is finalized (as real v11/v12 plugins that own per-process device state do):
 * until the next init, devices/getProperties/listen/connect fail with
 * ncclInvalidUsage. A host must keep a context open while it queries devices.
 */

typedef struct {
  int ndevs;
  int devs[8];
} ncclNetVDeviceProps_v12_t;

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
  ncclNetVDeviceProps_v12_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  short railId;
  short planeId;
} ncclNetProperties_v12_t;

typedef ncclResult_t (*zoo_prof_cb_t)(void** eHandle, int type, void* pHandle, int64_t pluginId, void* extData);

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, void* config, ncclDebugLogger_t logFunction,
                       zoo_prof_cb_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v8_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v12_t* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, void* netAttr);
} ncclNet_v12_t;

_Static_assert(sizeof(ncclNetProperties_v12_t) == 128, "ncclNetProperties_v12_t is 128 bytes");
_Static_assert(offsetof(ncclNetProperties_v12_t, vProps) == 64, "vProps at 64");
_Static_assert(offsetof(ncclNetProperties_v12_t, maxP2pBytes) == 104, "maxP2pBytes at 104");
_Static_assert(offsetof(ncclNetProperties_v12_t, railId) == 124, "railId at 124");
_Static_assert(sizeof(ncclNet_v12_t) == 176, "ncclNet_v12_t is 176 bytes");
_Static_assert(offsetof(ncclNet_v12_t, isend) == 80, "isend at 80");
_Static_assert(offsetof(ncclNet_v12_t, makeVDevice) == 152, "makeVDevice at 152");
_Static_assert(offsetof(ncclNet_v12_t, finalize) == 160, "finalize at 160");

#define ZOO_CTX_MAGIC 0x7a6f6f2d63747821ULL /* "zoo-ctx!" */
#define ZOO_MAX_CTX 64

static pthread_mutex_t v12_lock = PTHREAD_MUTEX_INITIALIZER;
static void* v12_ctx[ZOO_MAX_CTX]; /* live contexts */
static int v12_live = 0;
static int v12_up = 0; /* device state exists */

/* Whether `ctx` is a live context (looked up, never dereferenced: it may be freed). */
static int ctx_live(void* ctx) {
  int ok = 0;
  pthread_mutex_lock(&v12_lock);
  for (int i = 0; i < ZOO_MAX_CTX; i++) ok |= ctx != NULL && v12_ctx[i] == ctx;
  pthread_mutex_unlock(&v12_lock);
  return ok;
}

static int is_up(void) {
  pthread_mutex_lock(&v12_lock);
  int up = v12_up;
  pthread_mutex_unlock(&v12_lock);
  return up;
}

#define ZOO_NEED_UP(what)                                                                    \
  do {                                                                                       \
    if (!is_up()) {                                                                          \
      ZOO_WARN("zoo: %s called while no context is live (the plugin tore itself down)", what); \
      return ncclInvalidUsage;                                                               \
    }                                                                                        \
  } while (0)

static ncclResult_t v12_init(void** ctx, uint64_t commId, void* config, ncclDebugLogger_t logFunction,
                             zoo_prof_cb_t profFunction) {
  (void)config;
  (void)profFunction;
#ifdef ZOO_FAULT_TRAFFIC_CLASS
  /* Broken: refuses any defined traffic class (ncclNetCommConfig_t.trafficClass,
   * an int at offset 0; -1 = NCCL_NET_TRAFFIC_CLASS_UNDEF), so a communicator
   * configured with ncclConfig_t.trafficClass cannot use the plugin. */
  if (config != NULL && *(const int*)config != -1) {
    if (logFunction) zoo_log = logFunction;
    ZOO_WARN("zoo: traffic class %d not supported", *(const int*)config);
    return ncclInvalidArgument;
  }
#endif
  uint64_t* c = malloc(2 * sizeof(uint64_t));
  if (!c) return ncclSystemError;
  c[0] = ZOO_CTX_MAGIC;
  c[1] = commId;
  pthread_mutex_lock(&v12_lock);
  int slot = -1;
  for (int i = 0; i < ZOO_MAX_CTX && slot < 0; i++)
    if (v12_ctx[i] == NULL) slot = i;
  if (slot < 0) {
    pthread_mutex_unlock(&v12_lock);
    free(c);
    return ncclSystemError;
  }
  v12_ctx[slot] = c;
  v12_live++;
  int first = !v12_up;
  v12_up = 1;
  pthread_mutex_unlock(&v12_lock);
  if (first) zoo_init(logFunction);
  *ctx = c;
  return ncclSuccess;
}

static ncclResult_t v12_finalize(void* ctx) {
  pthread_mutex_lock(&v12_lock);
  int found = 0;
  for (int i = 0; i < ZOO_MAX_CTX; i++) {
    if (ctx != NULL && v12_ctx[i] == ctx) {
      v12_ctx[i] = NULL;
      found = 1;
    }
  }
  if (found) {
    v12_live--;
#ifdef ZOO_QUIRK_CTX_TEARDOWN
    if (v12_live == 0) v12_up = 0;
#endif
  }
  pthread_mutex_unlock(&v12_lock);
  if (!found) return ncclInvalidArgument;
  free(ctx);
  return ncclSuccess;
}

static ncclResult_t v12_devices(int* ndev) {
  ZOO_NEED_UP("devices");
  return zoo_devices(ndev);
}

static ncclResult_t v12_get_properties(int dev, ncclNetProperties_v12_t* props) {
  ZOO_NEED_UP("getProperties");
  ncclNetProperties_v8_t p8;
  ncclResult_t r = zoo_get_properties(dev, &p8);
  if (r != ncclSuccess) return r;
  memset(props, 0, sizeof(*props));
  props->name = p8.name;
  props->pciPath = p8.pciPath;
  props->guid = p8.guid;
  props->ptrSupport = p8.ptrSupport;
  props->regIsGlobal = p8.regIsGlobal;
  props->forceFlush = 0;
  props->speed = p8.speed;
  props->port = p8.port;
  props->latency = p8.latency;
  props->maxComms = p8.maxComms;
  props->maxRecvs = p8.maxRecvs;
  props->netDeviceType = p8.netDeviceType;
  props->netDeviceVersion = p8.netDeviceVersion;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = (size_t)1 << 31;
  props->maxCollBytes = (size_t)1 << 31;
  props->maxMultiRequestSize = 1;
  props->railId = -1;
  props->planeId = -1;
  return ncclSuccess;
}

static ncclResult_t v12_listen(void* ctx, int dev, void* handle, void** listenComm) {
  ZOO_NEED_UP("listen");
  if (!ctx_live(ctx)) return ncclInvalidArgument;
  return zoo_listen(dev, handle, listenComm);
}

static ncclResult_t v12_connect(void* ctx, int dev, void* handle, void** sendComm,
                                ncclNetDeviceHandle_v8_t** sendDevComm) {
  ZOO_NEED_UP("connect");
  if (!ctx_live(ctx)) return ncclInvalidArgument;
  return zoo_connect(dev, handle, sendComm, sendDevComm);
}

static ncclResult_t v12_isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                              void** request) {
  (void)phandle;
  if (size > (size_t)0x7fffffff) return ncclInvalidArgument;
  return zoo_isend(sendComm, data, (int)size, tag, mhandle, request);
}

static ncclResult_t v12_irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                              void** phandles, void** request) {
  (void)phandles;
  if (n != 1 || sizes[0] > (size_t)0x7fffffff) return ncclInternalError;
  int size = (int)sizes[0];
  return zoo_irecv(recvComm, n, data, &size, tags, mhandles, request);
}

__attribute__((visibility("default"))) const ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = ZOO_NAME,
    .init = v12_init,
    .devices = v12_devices,
    .getProperties = v12_get_properties,
    .listen = v12_listen,
    .connect = v12_connect,
    .accept = zoo_accept,
    .regMr = zoo_reg_mr,
    .regMrDmaBuf = zoo_reg_mr_dmabuf,
    .deregMr = zoo_dereg_mr,
    .isend = v12_isend,
    .irecv = v12_irecv,
    .iflush = zoo_iflush,
    .test = zoo_test,
    .closeSend = close_comm,
    .closeRecv = close_comm,
    .closeListen = zoo_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
    .finalize = v12_finalize,
    .setNetAttr = NULL,
};
