/*
 * A loopback ncclNet v6 plugin written in C, for ferroccl's host tests.
 *
 * The vtable and properties structs below are written by hand from the layout
 * tables of docs/reference/nccl-plugin-abi.md (section 1.2 ncclNetProperties_v6_t,
 * section 1.3 ncclNet_v6_t), NOT generated from ferroccl's Rust definitions, so
 * loading this library proves C compatibility independently. Offsets are checked
 * with _Static_assert.
 *
 * Network: in-process loopback. listen() registers a listener under a numeric id
 * written into the 128-byte handle; connect() finds it by that id (the first call
 * returns "not ready" and records progress in the handle, exercising NCCL's retry
 * contract); accept() pops the pending connection. isend copies the message into
 * a queue; the n-th irecv of a connection receives the n-th message.
 *
 * Build variants (see build.rs): CV6_LATE_TABLE, CV6_INIT_FAIL, CV6_ZERO_DEVICES,
 * CV6_NO_SYMBOL, CV6_EXPORT_V7_UNPACK.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- ABI (reference section 1, 4) ------------------------------------------------ */

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;

typedef enum { NCCL_LOG_NONE = 0, NCCL_LOG_VERSION = 1, NCCL_LOG_WARN = 2, NCCL_LOG_INFO = 3 } ncclDebugLogLevel;
#define NCCL_INIT 0x1UL
#define NCCL_NET 0x10UL
#define NCCL_PTR_HOST 0x1
#define NCCL_NET_HANDLE_MAXSIZE 128

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);

typedef struct {
  char* name;      /* 0 */
  char* pciPath;   /* 8 */
  uint64_t guid;   /* 16 */
  int ptrSupport;  /* 24 */
  int speed;       /* 28 */
  int port;        /* 32 */
  float latency;   /* 36 */
  int maxComms;    /* 40 */
  int maxRecvs;    /* 44 */
} ncclNetProperties_v6_t; /* 48 */

_Static_assert(sizeof(ncclNetProperties_v6_t) == 48, "props v6 size");
_Static_assert(offsetof(ncclNetProperties_v6_t, ptrSupport) == 24, "ptrSupport");
_Static_assert(offsetof(ncclNetProperties_v6_t, latency) == 36, "latency");
_Static_assert(offsetof(ncclNetProperties_v6_t, maxRecvs) == 44, "maxRecvs");

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v6_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm);
  ncclResult_t (*regMr)(void* comm, void* data, int size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
} ncclNet_v6_t;

_Static_assert(sizeof(ncclNet_v6_t) == 136, "ncclNet_v6_t size");
_Static_assert(offsetof(ncclNet_v6_t, init) == 8, "init");
_Static_assert(offsetof(ncclNet_v6_t, regMr) == 56, "regMr");
_Static_assert(offsetof(ncclNet_v6_t, regMrDmaBuf) == 64, "regMrDmaBuf");
_Static_assert(offsetof(ncclNet_v6_t, isend) == 80, "isend");
_Static_assert(offsetof(ncclNet_v6_t, test) == 104, "test");
_Static_assert(offsetof(ncclNet_v6_t, closeListen) == 128, "closeListen");

/* ---- loopback network ----------------------------------------------------------- */

#define CV6_MAGIC 0xC6C6C6C6C6C6C6C6ULL

struct msg {
  struct msg* next;
  uint64_t seq;
  int size;
  int tag;
  char data[];
};

struct conn { /* shared by the send and the recv side */
  pthread_mutex_t lock;
  struct msg* head; /* messages not yet received, in send order */
  uint64_t sent, posted;
  int refs;
};

struct listen_comm {
  uint64_t magic;
  uint64_t id;
  struct conn* pending[64];
  int npending;
  struct listen_comm* next;
};

struct send_comm { uint64_t magic; struct conn* c; };
struct recv_comm { uint64_t magic; struct conn* c; };

enum { REQ_SEND = 1, REQ_RECV = 2 };
struct request {
  int kind;
  int size;         /* send: size; recv: posted size */
  void* data;       /* recv buffer */
  uint64_t seq;     /* recv: which message */
  struct conn* c;
};

struct handle { uint64_t magic; uint64_t id; uint64_t connect_calls; };
_Static_assert(sizeof(struct handle) <= NCCL_NET_HANDLE_MAXSIZE, "handle fits");

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct listen_comm* g_listeners;
static uint64_t g_next_id = 1;
static ncclDebugLogger_t g_log;

#ifndef CV6_NAME
#if defined(CV6_LATE_TABLE)
#define CV6_NAME "CV6Late"
#elif defined(CV6_INIT_FAIL)
#define CV6_NAME "CV6InitFail"
#elif defined(CV6_ZERO_DEVICES)
#define CV6_NAME "CV6ZeroDev"
#elif defined(CV6_EXPORT_V7_UNPACK)
#define CV6_NAME "CV7Unpack"
#else
#define CV6_NAME "CV6"
#endif
#endif

static ncclResult_t cv6_init(ncclDebugLogger_t logFunction);

static ncclResult_t cv6_devices(int* ndev) {
#ifdef CV6_ZERO_DEVICES
  *ndev = 0;
#else
  *ndev = 1;
#endif
  return ncclSuccess;
}

static char g_dev_name[] = "cv6-loop0";

static ncclResult_t cv6_getProperties(int dev, ncclNetProperties_v6_t* props) {
  if (dev != 0 || props == NULL) return ncclInvalidArgument;
  props->name = g_dev_name;
  props->pciPath = NULL;
  props->guid = 0xC6;
  props->ptrSupport = NCCL_PTR_HOST;
  props->speed = 1234;
  props->port = 7;
  props->latency = 1.5f;
  props->maxComms = 4096;
  props->maxRecvs = 1;
  return ncclSuccess;
}

static ncclResult_t cv6_listen(int dev, void* handle, void** listenComm) {
  if (dev != 0 || handle == NULL || listenComm == NULL) return ncclInvalidArgument;
  struct listen_comm* l = calloc(1, sizeof(*l));
  if (l == NULL) return ncclSystemError;
  l->magic = CV6_MAGIC;
  pthread_mutex_lock(&g_lock);
  l->id = g_next_id++;
  l->next = g_listeners;
  g_listeners = l;
  pthread_mutex_unlock(&g_lock);
  struct handle h = {CV6_MAGIC, l->id, 0};
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  memcpy(handle, &h, sizeof(h));
  *listenComm = l;
  return ncclSuccess;
}

static ncclResult_t cv6_connect(int dev, void* handle, void** sendComm) {
  if (dev != 0 || handle == NULL || sendComm == NULL) return ncclInvalidArgument;
  struct handle h;
  memcpy(&h, handle, sizeof(h));
  if (h.magic != CV6_MAGIC) return ncclInvalidUsage;
  *sendComm = NULL;
  h.connect_calls++;
  memcpy(handle, &h, sizeof(h)); /* progress kept in the handle, as NCCL allows */
  if (h.connect_calls == 1) return ncclSuccess; /* not ready yet: call again */
  pthread_mutex_lock(&g_lock);
  struct listen_comm* l = g_listeners;
  while (l != NULL && l->id != h.id) l = l->next;
  if (l == NULL || l->npending == 64) {
    pthread_mutex_unlock(&g_lock);
    return ncclRemoteError;
  }
  struct conn* c = calloc(1, sizeof(*c));
  struct send_comm* s = calloc(1, sizeof(*s));
  if (c == NULL || s == NULL) {
    pthread_mutex_unlock(&g_lock);
    free(c);
    free(s);
    return ncclSystemError;
  }
  pthread_mutex_init(&c->lock, NULL);
  c->refs = 2;
  s->magic = CV6_MAGIC;
  s->c = c;
  l->pending[l->npending++] = c;
  pthread_mutex_unlock(&g_lock);
  *sendComm = s;
  return ncclSuccess;
}

static ncclResult_t cv6_accept(void* listenComm, void** recvComm) {
  struct listen_comm* l = listenComm;
  if (l == NULL || l->magic != CV6_MAGIC || recvComm == NULL) return ncclInternalError;
  *recvComm = NULL;
  pthread_mutex_lock(&g_lock);
  if (l->npending == 0) {
    pthread_mutex_unlock(&g_lock);
    return ncclSuccess;
  }
  struct conn* c = l->pending[0];
  memmove(&l->pending[0], &l->pending[1], sizeof(l->pending[0]) * (size_t)(l->npending - 1));
  l->npending--;
  pthread_mutex_unlock(&g_lock);
  struct recv_comm* r = calloc(1, sizeof(*r));
  if (r == NULL) return ncclSystemError;
  r->magic = CV6_MAGIC;
  r->c = c;
  *recvComm = r;
  return ncclSuccess;
}

static ncclResult_t cv6_regMr(void* comm, void* data, int size, int type, void** mhandle) {
  (void)data;
  if (comm == NULL || mhandle == NULL || size < 0) return ncclInternalError;
  if (type != NCCL_PTR_HOST) return ncclInternalError;
  int* mr = malloc(sizeof(int));
  if (mr == NULL) return ncclSystemError;
  *mr = size;
  *mhandle = mr;
  return ncclSuccess;
}

static ncclResult_t cv6_deregMr(void* comm, void* mhandle) {
  if (comm == NULL) return ncclInternalError;
  free(mhandle);
  return ncclSuccess;
}

static ncclResult_t cv6_isend(void* sendComm, void* data, int size, int tag, void* mhandle, void** request) {
  (void)mhandle;
  struct send_comm* s = sendComm;
  if (s == NULL || s->magic != CV6_MAGIC || size < 0 || request == NULL) return ncclInternalError;
  struct msg* m = malloc(sizeof(*m) + (size_t)size);
  struct request* r = calloc(1, sizeof(*r));
  if (m == NULL || r == NULL) {
    free(m);
    free(r);
    return ncclSystemError;
  }
  m->next = NULL;
  m->size = size;
  m->tag = tag;
  if (size > 0) memcpy(m->data, data, (size_t)size);
  struct conn* c = s->c;
  pthread_mutex_lock(&c->lock);
  m->seq = c->sent++;
  struct msg** tail = &c->head;
  while (*tail != NULL) tail = &(*tail)->next;
  *tail = m;
  pthread_mutex_unlock(&c->lock);
  r->kind = REQ_SEND;
  r->size = size;
  *request = r;
  return ncclSuccess;
}

static ncclResult_t cv6_irecv(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                              void** request) {
  (void)tags;
  (void)mhandles;
  struct recv_comm* rc = recvComm;
  if (rc == NULL || rc->magic != CV6_MAGIC || request == NULL) return ncclInternalError;
  /* A v6 plugin never sees NCCL_NET_OPTIONAL_RECV_COMPLETION: NCCL's adapter NULLs *request. */
  if (*request != NULL) return ncclInternalError;
  if (n != 1) return ncclInternalError; /* maxRecvs = 1 */
  struct request* r = calloc(1, sizeof(*r));
  if (r == NULL) return ncclSystemError;
  r->kind = REQ_RECV;
  r->size = sizes[0];
  r->data = data[0];
  r->c = rc->c;
  pthread_mutex_lock(&rc->c->lock);
  r->seq = rc->c->posted++;
  pthread_mutex_unlock(&rc->c->lock);
  *request = r;
  return ncclSuccess;
}

static ncclResult_t cv6_iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  (void)recvComm;
  (void)n;
  (void)data;
  (void)sizes;
  (void)mhandles;
  *request = NULL; /* host memory: nothing to flush */
  return ncclSuccess;
}

static ncclResult_t cv6_test(void* request, int* done, int* sizes) {
  struct request* r = request;
  if (r == NULL || done == NULL) return ncclInternalError;
  *done = 0;
  if (r->kind == REQ_SEND) {
    *done = 1;
    if (sizes != NULL) sizes[0] = r->size;
    free(r);
    return ncclSuccess;
  }
  struct conn* c = r->c;
  pthread_mutex_lock(&c->lock);
  struct msg** pp = &c->head;
  while (*pp != NULL && (*pp)->seq != r->seq) pp = &(*pp)->next;
  struct msg* m = *pp;
  if (m == NULL) {
    pthread_mutex_unlock(&c->lock);
    return ncclSuccess; /* not arrived yet */
  }
  *pp = m->next;
  pthread_mutex_unlock(&c->lock);
  if (m->size > r->size) {
    free(m);
    free(r);
    return ncclInvalidUsage; /* message larger than the posted buffer */
  }
  if (m->size > 0) memcpy(r->data, m->data, (size_t)m->size);
  *done = 1;
  if (sizes != NULL) sizes[0] = m->size;
  free(m);
  free(r);
  return ncclSuccess;
}

static void conn_unref(struct conn* c) {
  pthread_mutex_lock(&c->lock);
  int left = --c->refs;
  pthread_mutex_unlock(&c->lock);
  if (left == 0) {
    struct msg* m = c->head;
    while (m != NULL) {
      struct msg* next = m->next;
      free(m);
      m = next;
    }
    pthread_mutex_destroy(&c->lock);
    free(c);
  }
}

static ncclResult_t cv6_closeSend(void* sendComm) {
  struct send_comm* s = sendComm;
  if (s == NULL || s->magic != CV6_MAGIC) return ncclInternalError;
  conn_unref(s->c);
  s->magic = 0;
  free(s);
  return ncclSuccess;
}

static ncclResult_t cv6_closeRecv(void* recvComm) {
  struct recv_comm* r = recvComm;
  if (r == NULL || r->magic != CV6_MAGIC) return ncclInternalError;
  conn_unref(r->c);
  r->magic = 0;
  free(r);
  return ncclSuccess;
}

static ncclResult_t cv6_closeListen(void* listenComm) {
  struct listen_comm* l = listenComm;
  if (l == NULL || l->magic != CV6_MAGIC) return ncclInternalError;
  pthread_mutex_lock(&g_lock);
  struct listen_comm** pp = &g_listeners;
  while (*pp != NULL && *pp != l) pp = &(*pp)->next;
  if (*pp == l) *pp = l->next;
  for (int i = 0; i < l->npending; i++) conn_unref(l->pending[i]); /* the recv side that never came */
  pthread_mutex_unlock(&g_lock);
  l->magic = 0;
  free(l);
  return ncclSuccess;
}

/* ---- exported tables ---------------------------------------------------------------- */

#define CV6_FULL_TABLE                                                                                     \
  {CV6_NAME,    cv6_init,     cv6_devices, cv6_getProperties, cv6_listen,    cv6_connect,                 \
   cv6_accept,  cv6_regMr,    NULL,        cv6_deregMr,       cv6_isend,     cv6_irecv,                   \
   cv6_iflush,  cv6_test,     cv6_closeSend, cv6_closeRecv,   cv6_closeListen}

#if defined(CV6_NO_SYMBOL)
/* Only an unsupported version: the host must report "no symbol". */
ncclNet_v6_t ncclNetPlugin_v5 = CV6_FULL_TABLE;
#elif defined(CV6_EXPORT_V7_UNPACK)
/* ---- v7 variant: device 0 claims NCCL_NET_DEVICE_UNPACK version 7 ---- */
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;    /* 48 */
  int netDeviceVersion; /* 52 */
} ncclNetProperties_v7_t;
_Static_assert(sizeof(ncclNetProperties_v7_t) == 56, "props v7 size");

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v7_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, void** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, void** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, int size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
} ncclNet_v7_t;
_Static_assert(sizeof(ncclNet_v7_t) == 152, "ncclNet_v7_t size");

static ncclResult_t cv7_getProperties(int dev, ncclNetProperties_v7_t* props) {
  ncclNetProperties_v6_t p6;
  ncclResult_t r = cv6_getProperties(dev, &p6);
  if (r != ncclSuccess) return r;
  memcpy(props, &p6, sizeof(p6));
  props->netDeviceType = 1;    /* NCCL_NET_DEVICE_UNPACK */
  props->netDeviceVersion = 7; /* NCCL_NET_DEVICE_UNPACK_VERSION */
  return ncclSuccess;
}
static ncclResult_t cv7_connect(int dev, void* handle, void** sendComm, void** sendDevComm) {
  if (sendDevComm != NULL) *sendDevComm = NULL;
  return cv6_connect(dev, handle, sendComm);
}
static ncclResult_t cv7_accept(void* listenComm, void** recvComm, void** recvDevComm) {
  if (recvDevComm != NULL) *recvDevComm = NULL;
  return cv6_accept(listenComm, recvComm);
}
ncclNet_v7_t ncclNetPlugin_v7 = {CV6_NAME,      cv6_init,      cv6_devices,   cv7_getProperties, cv6_listen,
                                 cv7_connect,   cv7_accept,    cv6_regMr,     NULL,              cv6_deregMr,
                                 cv6_isend,     cv6_irecv,     cv6_iflush,    cv6_test,          cv6_closeSend,
                                 cv6_closeRecv, cv6_closeListen, NULL,        NULL};
#elif defined(CV6_LATE_TABLE)
/* Every slot but name and init is NULL until init fills the table in, as some
 * real plugins do: a host that reads function pointers before init crashes or
 * sees NULLs. */
ncclNet_v6_t ncclNetPlugin_v6 = {CV6_NAME, cv6_init, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                 NULL,     NULL,     NULL, NULL, NULL, NULL, NULL, NULL};
static const ncclNet_v6_t g_full = CV6_FULL_TABLE;
#else
ncclNet_v6_t ncclNetPlugin_v6 = CV6_FULL_TABLE;
#endif

static ncclResult_t cv6_init(ncclDebugLogger_t logFunction) {
  g_log = logFunction;
  if (g_log != NULL) g_log(NCCL_LOG_INFO, NCCL_INIT | NCCL_NET, __FILE__, __LINE__, "%s init: v%d loopback, %s", CV6_NAME, 6, "ready");
#ifdef CV6_INIT_FAIL
  if (g_log != NULL) g_log(NCCL_LOG_WARN, ~0UL, __FILE__, __LINE__, "%s init failing on purpose (code %d)", CV6_NAME, 2);
  return ncclSystemError;
#endif
#ifdef CV6_LATE_TABLE
  ncclNetPlugin_v6 = g_full;
#endif
  return ncclSuccess;
}
