/*
 * The conformance "zoo": one small TCP network plugin in plain C with the
 * ncclNet_v8 layout (docs/reference/nccl-plugin-abi.md §1.2, §1.3), compiled
 * once per fault switch into testing/zoo-* cdylibs. ZOO_FAULT_NONE is the correct
 * control; every other switch plants exactly one contract violation that one
 * conformance check is meant to catch:
 *
 *   ZOO_FAULT_BLOCK_CONNECT   connect() blocks waiting for a reply only accept() sends
 *   ZOO_FAULT_WRONG_SIZES     test() reports the posted receive size, not the true size
 *   ZOO_FAULT_REORDER         an incoming message lands in the newest posted receive
 *   ZOO_FAULT_CORRUPT         one byte past 1 MiB of a received message is flipped
 *   ZOO_FAULT_NULL_NAME       the vtable's name is NULL
 *   ZOO_FAULT_LEAK_FD         closeSend/closeRecv never close the socket
 *   ZOO_FAULT_HANG_PEER_DEATH end-of-file / EPIPE from a dead peer is treated as "try again"
 *   ZOO_FAULT_NO_SIZES        test() never writes sizes (NCCL runs it: it only reads receive
 *                             sizes for GPU flushes and the profiler)
 *   ZOO_FAULT_NO_DEVICES      devices() reports 0 (NCCL disables such a plugin)
 *
 * Quirk switches make a plugin that is CORRECT but unusual: NCCL drives it fine,
 * so the required tier of the suite must pass on it (proof of no false failures):
 *
 *   ZOO_QUIRK_HANDLE_STATE    connect keeps its state in the handle and refuses a handle
 *                             buffer an earlier connection already used
 *   ZOO_QUIRK_DEREF_MHANDLE   isend/irecv dereference the mhandle and check the buffer
 *                             lies inside that registration, on that comm (NULL crashes)
 *   ZOO_QUIRK_OLDEST_TEST     test() refuses any request but the oldest outstanding one of
 *                             its comm (ncclInternalError)
 *   ZOO_QUIRK_SLOW_CONNECT    connect and accept return NULL for their first 100 calls
 *                             per connection
 *   ZOO_QUIRK_THREADS         every comm has a helper thread doing its I/O (joined at close)
 *   ZOO_QUIRK_CTX_TEARDOWN    (with ZOO_EXPORT_V12) the plugin tears itself down when its
 *                             last context is finalized: every call but init then fails
 *                             until init is called again
 *   ZOO_QUIRK_GDR             a GPUDirect NIC for hosts without a GPU: advertises
 *                             NCCL_PTR_CUDA (and NCCL_PTR_DMABUF with ZOO_GDR_DMABUF=1), takes
 *                             the PCI path in ZOO_GDR_PCI_PATH, reaches memory registered as
 *                             CUDA/DMA-BUF only through /proc/self/mem (as a DMA engine would:
 *                             the mock device's pages are PROT_NONE), and appends every
 *                             regMr/regMrDmaBuf/iflush and every transfer from or into such
 *                             memory to the file named by ZOO_GDR_LOG (one line each, pid first)
 *
 * Export: by default a Rust cdylib (testing/zoo-*) defines the data symbol and a
 * constructor here fills it. With ZOO_STANDALONE this file is the whole plugin
 * (testing/zoo-quirky compiles it with the system C compiler) and defines
 * ncclNetPlugin_v8 itself, or only ncclNetPlugin_v12 with ZOO_EXPORT_V12.
 *
 * Wire protocol: the handle holds a sockaddr_in (offset 0) of a listening TCP
 * socket on 127.0.0.1 and a magic (offset 16); offsets 24..32 hold the connector's
 * retry state (NCCL calls connect again with the same handle buffer). A connection
 * starts with the 8-byte magic; each message is an 8-byte size followed by the
 * payload. All sockets are non-blocking; all I/O happens inside test().
 *
 * The vtable is copied at load time into the data symbol `ncclNetPlugin_v8`, which
 * the Rust cdylib defines and exports (a C symbol inside a Rust cdylib would be
 * hidden by rustc's version script).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef enum {
  ncclSuccess = 0,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6
} ncclResult_t;

typedef void (*ncclDebugLogger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v8_t;

typedef struct {
  int netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v8_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v8_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
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
} ncclNet_v8_t;

#define ZOO_MAGIC 0x7a6f6f2d6e657421ULL /* "zoo-net!" */
#define ZOO_MAX_REQUESTS 32
#define ZOO_MR_MAGIC 0x6d72u

static ncclDebugLogger_t zoo_log = NULL;

#define ZOO_WARN(...)                                        \
  do {                                                       \
    if (zoo_log) zoo_log(2, ~0UL, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define ZOO_INFO(...)                                        \
  do {                                                       \
    if (zoo_log) zoo_log(3, 0x10UL, __func__, __LINE__, __VA_ARGS__); \
  } while (0)

struct zoo_handle {
  struct sockaddr_in addr; /* 0..16 */
  uint64_t magic;          /* 16..24 */
  uint32_t stage;          /* 24: connector retry state (0 new, 1 connecting, 2 used) */
  int32_t fd;              /* 28: connector's socket while stage == 1 */
  uint32_t calls;          /* 32: connect calls on this handle (ZOO_QUIRK_SLOW_CONNECT) */
};

/* Calls before connect/accept make progress with ZOO_QUIRK_SLOW_CONNECT. */
#define ZOO_SLOW_CALLS 100

struct zoo_listen {
  int fd;
  int pending_fd;
  int pending_got;
  unsigned char pending_buf[8];
  unsigned calls; /* accept calls since the last connection (ZOO_QUIRK_SLOW_CONNECT) */
};

enum { REQ_FREE = 0, REQ_POSTED, REQ_IO, REQ_DONE, REQ_FAILED };

struct zoo_comm;

struct zoo_req {
  int state;
  char* dev;    /* ZOO_QUIRK_GDR: the device address `data` mirrors (NULL: host memory) */
  uint64_t seq;
  struct zoo_comm* comm;
  char* data;
  size_t size;      /* posted size */
  size_t true_size; /* bytes of the message (recv: from the header) */
  size_t off;       /* payload bytes done */
  unsigned char hdr[8];
  int hdr_off;
};

struct zoo_comm {
  int fd;
  int is_send;
  uint64_t next_seq;
  struct zoo_req* cur; /* request whose I/O is in progress */
  struct zoo_req reqs[ZOO_MAX_REQUESTS];
#ifdef ZOO_QUIRK_THREADS
  pthread_mutex_t lock; /* everything above, shared with the helper thread */
  pthread_t helper;
  int stop;
#endif
};

struct zoo_mr {
  unsigned magic;
  int cuda;    /* registered as NCCL_PTR_CUDA or through DMA-BUF */
  void* comm;  /* the comm it was registered on */
  char* base;  /* registered range */
  size_t size;
};

#ifdef ZOO_QUIRK_THREADS
#define LOCK(c) pthread_mutex_lock(&(c)->lock)
#define UNLOCK(c) pthread_mutex_unlock(&(c)->lock)
#else
#define LOCK(c) ((void)(c))
#define UNLOCK(c) ((void)(c))
#endif

static ncclResult_t zoo_init(ncclDebugLogger_t logFunction) {
  zoo_log = logFunction;
  ZOO_INFO("zoo net plugin initialised (%s)", ZOO_FAULT_NAME);
  return ncclSuccess;
}

static ncclResult_t zoo_devices(int* ndev) {
#ifdef ZOO_FAULT_NO_DEVICES
  *ndev = 0; /* like NCCL's example plugin stub */
#else
  *ndev = 1;
#endif
  return ncclSuccess;
}

static ncclResult_t zoo_get_properties(int dev, ncclNetProperties_v8_t* props) {
  if (dev != 0) return ncclInvalidArgument;
  memset(props, 0, sizeof(*props));
  props->name = (char*)"lo";
  props->pciPath = NULL;
  props->guid = 0;
  props->ptrSupport = 1; /* NCCL_PTR_HOST */
#ifdef ZOO_QUIRK_GDR
  props->ptrSupport |= 2; /* NCCL_PTR_CUDA */
  {
    const char* d = getenv("ZOO_GDR_DMABUF");
    if (d && strcmp(d, "1") == 0) props->ptrSupport |= 4; /* NCCL_PTR_DMABUF */
    props->pciPath = getenv("ZOO_GDR_PCI_PATH");
  }
#endif
  props->regIsGlobal = 0;
  props->speed = 10000;
  props->port = 0;
  props->latency = 0;
  props->maxComms = 1024;
  props->maxRecvs = 1;
  props->netDeviceType = 0;
  props->netDeviceVersion = 0;
  return ncclSuccess;
}

static ncclResult_t zoo_listen(int dev, void* handle, void** listenComm) {
  if (dev != 0) return ncclInvalidArgument;
  struct zoo_handle* h = (struct zoo_handle*)handle;
  memset(h, 0, sizeof(*h));
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ncclSystemError;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (bind(fd, (struct sockaddr*)&a, sizeof a) != 0 || listen(fd, 128) != 0 ||
      getsockname(fd, (struct sockaddr*)&a, &len) != 0) {
    close(fd);
    return ncclSystemError;
  }
  struct zoo_listen* l = calloc(1, sizeof *l);
  if (!l) {
    close(fd);
    return ncclSystemError;
  }
  l->fd = fd;
  l->pending_fd = -1;
  h->addr = a;
  h->magic = ZOO_MAGIC;
  h->stage = 0;
  h->fd = -1;
  h->calls = 0;
  *listenComm = l;
  return ncclSuccess;
}

static ncclResult_t progress(struct zoo_comm* c);

#ifdef ZOO_QUIRK_THREADS
/* The helper thread: progresses the comm's I/O in the background, waiting in poll(). */
static void* zoo_helper(void* arg) {
  struct zoo_comm* c = (struct zoo_comm*)arg;
  for (;;) {
    LOCK(c);
    if (c->stop) {
      UNLOCK(c);
      return NULL;
    }
    (void)progress(c); /* failures are recorded in the request and reported by test() */
    short ev = c->is_send ? POLLOUT : POLLIN;
    int busy = c->cur != NULL;
    UNLOCK(c);
    struct pollfd p = {.fd = c->fd, .events = busy ? ev : 0, .revents = 0};
    (void)poll(&p, 1, 1);
  }
}
#endif

static struct zoo_comm* new_comm(int fd, int is_send) {
  struct zoo_comm* c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->fd = fd;
  c->is_send = is_send;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
#ifdef ZOO_QUIRK_THREADS
  pthread_mutex_init(&c->lock, NULL);
  if (pthread_create(&c->helper, NULL, zoo_helper, c) != 0) {
    pthread_mutex_destroy(&c->lock);
    free(c);
    return NULL;
  }
#endif
  return c;
}

static ncclResult_t zoo_connect(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v8_t** sendDevComm) {
  (void)dev;
  struct zoo_handle* h = (struct zoo_handle*)handle;
  *sendComm = NULL;
  if (sendDevComm) *sendDevComm = NULL;
  if (h->magic != ZOO_MAGIC) return ncclInvalidArgument;
#ifdef ZOO_QUIRK_HANDLE_STATE
  if (h->stage == 2) {
    ZOO_WARN("zoo: connect with a handle buffer an earlier connection already used (each connection needs its own copy of the listen handle)");
    return ncclInvalidUsage;
  }
#endif
#ifdef ZOO_QUIRK_SLOW_CONNECT
  if (h->calls++ < ZOO_SLOW_CALLS) return ncclSuccess; /* not yet: call again */
#endif
#ifdef ZOO_FAULT_BLOCK_CONNECT
  /* Fault: a blocking handshake that waits for a byte only accept() would send. */
  {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return ncclSystemError;
    if (connect(fd, (struct sockaddr*)&h->addr, sizeof h->addr) != 0) {
      close(fd);
      return ncclSystemError;
    }
    char ack;
    while (recv(fd, &ack, 1, 0) < 0 && errno == EINTR) {
    }
    close(fd);
    return ncclSystemError;
  }
#endif
  if (h->stage == 0) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return ncclSystemError;
    if (connect(fd, (struct sockaddr*)&h->addr, sizeof h->addr) != 0 && errno != EINPROGRESS) {
      ZOO_WARN("zoo: connect failed: %s", strerror(errno));
      close(fd);
      return ncclSystemError;
    }
    h->fd = fd;
    h->stage = 1;
  }
  struct pollfd p = {.fd = h->fd, .events = POLLOUT, .revents = 0};
  if (poll(&p, 1, 0) <= 0) return ncclSuccess; /* not yet: call again */
  int err = 0;
  socklen_t elen = sizeof err;
  getsockopt(h->fd, SOL_SOCKET, SO_ERROR, &err, &elen);
  int fd = h->fd;
#ifdef ZOO_QUIRK_HANDLE_STATE
  h->stage = 2; /* used: this copy of the handle belongs to this connection */
#else
  h->stage = 0;
#endif
  h->fd = -1;
  if (err != 0) {
    close(fd);
    return ncclSystemError;
  }
  uint64_t magic = ZOO_MAGIC;
  if (send(fd, &magic, sizeof magic, MSG_NOSIGNAL) != (ssize_t)sizeof magic) {
    close(fd);
    return ncclSystemError;
  }
  struct zoo_comm* c = new_comm(fd, 1);
  if (!c) {
    close(fd);
    return ncclSystemError;
  }
  *sendComm = c;
  return ncclSuccess;
}

static ncclResult_t zoo_accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t** recvDevComm) {
  struct zoo_listen* l = (struct zoo_listen*)listenComm;
  *recvComm = NULL;
  if (recvDevComm) *recvDevComm = NULL;
#ifdef ZOO_QUIRK_SLOW_CONNECT
  if (l->calls++ < ZOO_SLOW_CALLS) return ncclSuccess; /* not yet: call again */
#endif
  if (l->pending_fd < 0) {
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) return ncclSuccess;
      return ncclSystemError;
    }
    l->pending_fd = fd;
    l->pending_got = 0;
  }
  while (l->pending_got < 8) {
    ssize_t n = recv(l->pending_fd, l->pending_buf + l->pending_got, 8 - l->pending_got, 0);
    if (n > 0) {
      l->pending_got += (int)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return ncclSuccess;
    /* A stray client went away before sending the magic: drop it, keep listening. */
    close(l->pending_fd);
    l->pending_fd = -1;
    return ncclSuccess;
  }
  uint64_t magic;
  memcpy(&magic, l->pending_buf, 8);
  int fd = l->pending_fd;
  l->pending_fd = -1;
  if (magic != ZOO_MAGIC) {
    ZOO_INFO("zoo: dropping a connection with a bad magic");
    close(fd);
    return ncclSuccess;
  }
  struct zoo_comm* c = new_comm(fd, 0);
  if (!c) {
    close(fd);
    return ncclSystemError;
  }
  l->calls = 0;
  *recvComm = c;
  return ncclSuccess;
}

#ifdef ZOO_QUIRK_GDR
#include <stdarg.h>
/* Appends one line (pid first) to $ZOO_GDR_LOG. */
static void gdr_log(const char* fmt, ...) {
  const char* path = getenv("ZOO_GDR_LOG");
  if (!path) return;
  char line[256];
  int n = snprintf(line, sizeof line, "%d ", (int)getpid());
  va_list ap;
  va_start(ap, fmt);
  n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  ssize_t w = write(fd, line, (size_t)n);
  (void)w;
  close(fd);
}

/* The "DMA engine": device memory is reached through /proc/self/mem only. */
static int gdr_mem_fd(void) {
  static int fd = -1;
  if (fd < 0) fd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
  return fd;
}

static int gdr_copy(char* dst, const char* src, size_t n, int to_device) {
  int fd = gdr_mem_fd();
  if (fd < 0) return -1;
  size_t done = 0;
  while (done < n) {
    ssize_t k = to_device ? pwrite(fd, src + done, n - done, (off_t)(uintptr_t)(dst + done))
                          : pread(fd, dst + done, n - done, (off_t)(uintptr_t)(src + done));
    if (k <= 0) return -1;
    done += (size_t)k;
  }
  return 0;
}

static int mr_is_cuda(void* mhandle) {
  struct zoo_mr* mr = (struct zoo_mr*)mhandle;
  return mr != NULL && mr->magic == ZOO_MR_MAGIC && mr->cuda;
}
#endif

static ncclResult_t zoo_reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) {
#ifdef ZOO_QUIRK_GDR
  if (type != 1 && type != 2) return ncclInternalError;
  gdr_log("regMr type %d size %zu", type, size);
#else
  if (type != 1) return ncclInternalError;
#endif
  struct zoo_mr* mr = malloc(sizeof *mr);
  if (!mr) return ncclSystemError;
  mr->magic = ZOO_MR_MAGIC;
  mr->cuda = type == 2;
  mr->comm = comm;
  mr->base = (char*)data;
  mr->size = size;
  *mhandle = mr;
  return ncclSuccess;
}

/* ZOO_QUIRK_DEREF_MHANDLE: like a NIC that needs the memory key of every buffer it
 * touches, read the registration (a NULL mhandle crashes here) and check it covers
 * [data, data + size) on this comm. */
static ncclResult_t check_mr(void* comm, void* mhandle, void* data, size_t size) {
#ifdef ZOO_QUIRK_DEREF_MHANDLE
  struct zoo_mr* mr = (struct zoo_mr*)mhandle;
  if (mr->magic != ZOO_MR_MAGIC) {
    ZOO_WARN("zoo: mhandle %p is not a live registration", mhandle);
    return ncclInternalError;
  }
  if (mr->comm != comm) {
    ZOO_WARN("zoo: mhandle %p was registered on another comm", mhandle);
    return ncclInternalError;
  }
  if ((char*)data < mr->base || (char*)data + size > mr->base + mr->size) {
    ZOO_WARN("zoo: buffer %p+%zu is outside its registration %p+%zu", data, size, (void*)mr->base, mr->size);
    return ncclInternalError;
  }
#else
  (void)comm;
  (void)mhandle;
  (void)data;
  (void)size;
#endif
  return ncclSuccess;
}

static ncclResult_t zoo_reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                                      void** mhandle) {
#ifdef ZOO_QUIRK_GDR
  /* The descriptor must be open during the call (the host closes it afterwards). */
  int valid = fcntl(fd, F_GETFD) >= 0;
  gdr_log("regMrDmaBuf type %d size %zu offset %llu fd_valid %d", type, size, (unsigned long long)offset, valid);
  if (!valid) return ncclInvalidArgument;
  struct zoo_mr* mr = malloc(sizeof *mr);
  if (!mr) return ncclSystemError;
  mr->magic = ZOO_MR_MAGIC;
  mr->cuda = 1;
  mr->comm = comm;
  mr->base = (char*)data;
  mr->size = size;
  *mhandle = mr;
  return ncclSuccess;
#else
  (void)comm; (void)data; (void)size; (void)type; (void)offset; (void)fd; (void)mhandle;
  return ncclInternalError;
#endif
}

static ncclResult_t zoo_dereg_mr(void* comm, void* mhandle) {
  (void)comm;
  struct zoo_mr* mr = (struct zoo_mr*)mhandle;
  if (mr == NULL || mr->magic != ZOO_MR_MAGIC) return ncclInternalError;
  mr->magic = 0;
  free(mr);
  return ncclSuccess;
}

static struct zoo_req* post(struct zoo_comm* c, void* data, size_t size) {
  for (int i = 0; i < ZOO_MAX_REQUESTS; i++) {
    struct zoo_req* r = &c->reqs[i];
    if (r->state != REQ_FREE) continue;
    memset(r, 0, sizeof *r);
    r->state = REQ_POSTED;
    r->seq = c->next_seq++;
    r->comm = c;
    r->data = data;
    r->size = size;
    return r;
  }
  return NULL; /* back-pressure: the caller retries */
}

static ncclResult_t zoo_isend(void* sendComm, void* data, int size, int tag, void* mhandle, void** request) {
  (void)tag;
  struct zoo_comm* c = (struct zoo_comm*)sendComm;
  if (!c->is_send || size < 0) return ncclInternalError;
  ncclResult_t r = check_mr(sendComm, mhandle, data, (size_t)size);
  if (r != ncclSuccess) return r;
#ifdef ZOO_QUIRK_GDR
  char* mirror = NULL;
  if (mr_is_cuda(mhandle)) {
    /* DMA read of the device memory at post time (it stays unchanged until completion). */
    mirror = malloc(size > 0 ? (size_t)size : 1);
    if (!mirror) return ncclSystemError;
    if (gdr_copy(mirror, data, (size_t)size, 0) != 0) {
      free(mirror);
      return ncclSystemError;
    }
  }
#endif
  LOCK(c);
  *request = post(c, data, (size_t)size);
  if (*request) ((struct zoo_req*)*request)->true_size = (size_t)size;
#ifdef ZOO_QUIRK_GDR
  if (*request && mirror) {
    struct zoo_req* q = (struct zoo_req*)*request;
    q->dev = q->data;
    q->data = mirror;
    gdr_log("isend cuda size %d", size);
  } else {
    free(mirror);
  }
#endif
  UNLOCK(c);
  return ncclSuccess;
}

static ncclResult_t zoo_irecv(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                              void** request) {
  (void)tags;
  struct zoo_comm* c = (struct zoo_comm*)recvComm;
  if (c->is_send || n != 1 || sizes[0] < 0) return ncclInternalError;
  ncclResult_t r = check_mr(recvComm, mhandles ? mhandles[0] : NULL, data[0], (size_t)sizes[0]);
  if (r != ncclSuccess) return r;
#ifdef ZOO_QUIRK_GDR
  char* mirror = NULL;
  if (mr_is_cuda(mhandles ? mhandles[0] : NULL)) {
    mirror = malloc(sizes[0] > 0 ? (size_t)sizes[0] : 1);
    if (!mirror) return ncclSystemError;
  }
#endif
  LOCK(c);
  *request = post(c, data[0], (size_t)sizes[0]);
#ifdef ZOO_QUIRK_GDR
  if (*request && mirror) {
    struct zoo_req* q = (struct zoo_req*)*request;
    q->dev = q->data;
    q->data = mirror;
    gdr_log("irecv cuda size %d", sizes[0]);
  } else {
    free(mirror);
  }
#endif
  UNLOCK(c);
  return ncclSuccess;
}

static ncclResult_t zoo_iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
#ifdef ZOO_QUIRK_GDR
  (void)data;
  struct zoo_comm* c = (struct zoo_comm*)recvComm;
  int cuda = n == 1 && mhandles != NULL && mr_is_cuda(mhandles[0]);
  gdr_log("iflush n %d size %d cuda %d", n, n > 0 ? sizes[0] : -1, cuda);
  /* A request completed at its first test (the host must test it). */
  LOCK(c);
  struct zoo_req* r = post(c, NULL, 0);
  if (r) r->state = REQ_DONE;
  UNLOCK(c);
  *request = r;
  return ncclSuccess;
#else
  (void)recvComm; (void)n; (void)data; (void)sizes; (void)mhandles;
  *request = NULL; /* host memory: nothing to flush */
  return ncclSuccess;
#endif
}

/* Picks the next request to do I/O for: the oldest posted one (the contract);
 * with ZOO_FAULT_REORDER a receive picks the newest. */
static struct zoo_req* next_io(struct zoo_comm* c) {
  struct zoo_req* best = NULL;
  for (int i = 0; i < ZOO_MAX_REQUESTS; i++) {
    struct zoo_req* r = &c->reqs[i];
    if (r->state != REQ_POSTED) continue;
#ifdef ZOO_FAULT_REORDER
    if (!c->is_send) {
      if (best == NULL || r->seq > best->seq) best = r;
      continue;
    }
#endif
    if (best == NULL || r->seq < best->seq) best = r;
  }
  return best;
}

static inline int would_block(ssize_t n) {
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
}

/* 1: progress possible, 0: would block, -1: error (peer gone). */
static int peer_gone(ssize_t n) {
#ifdef ZOO_FAULT_HANG_PEER_DEATH
  (void)n;
  return 0; /* Fault: EOF / EPIPE are treated as "no data yet", forever. */
#else
  return n == 0 || (n < 0 && !would_block(n));
#endif
}

static ncclResult_t progress(struct zoo_comm* c) {
  for (;;) {
    if (c->cur == NULL) {
      c->cur = next_io(c);
      if (c->cur == NULL) return ncclSuccess;
      c->cur->state = REQ_IO;
      if (c->is_send) {
        uint64_t sz = c->cur->size;
        memcpy(c->cur->hdr, &sz, 8);
      }
    }
    struct zoo_req* r = c->cur;
    while (r->hdr_off < 8) {
      ssize_t n = c->is_send ? send(c->fd, r->hdr + r->hdr_off, 8 - r->hdr_off, MSG_NOSIGNAL)
                             : recv(c->fd, r->hdr + r->hdr_off, 8 - r->hdr_off, 0);
      if (n > 0) {
        r->hdr_off += (int)n;
        continue;
      }
      if (peer_gone(n)) {
        r->state = REQ_FAILED;
        c->cur = NULL;
        return ncclSystemError;
      }
      return ncclSuccess;
    }
    if (!c->is_send && r->off == 0 && r->true_size == 0) {
      uint64_t sz;
      memcpy(&sz, r->hdr, 8);
      if (sz > r->size) {
        ZOO_WARN("zoo: message of %llu bytes does not fit the posted %zu bytes", (unsigned long long)sz, r->size);
        r->state = REQ_FAILED;
        c->cur = NULL;
        return ncclInvalidUsage;
      }
      r->true_size = sz;
    }
    while (r->off < r->true_size) {
      ssize_t n = c->is_send ? send(c->fd, r->data + r->off, r->true_size - r->off, MSG_NOSIGNAL)
                             : recv(c->fd, r->data + r->off, r->true_size - r->off, 0);
      if (n > 0) {
        r->off += (size_t)n;
        continue;
      }
      if (peer_gone(n)) {
        r->state = REQ_FAILED;
        c->cur = NULL;
        return ncclSystemError;
      }
      return ncclSuccess;
    }
#ifdef ZOO_FAULT_CORRUPT
    if (!c->is_send && r->true_size > (1u << 20)) r->data[(1u << 20) + 3] ^= 0x5a;
#endif
    r->state = REQ_DONE;
    c->cur = NULL;
  }
}

/* ZOO_QUIRK_OLDEST_TEST: whether `r` is the oldest outstanding request of its comm. */
static int is_oldest(struct zoo_req* r) {
  struct zoo_comm* c = r->comm;
  for (int i = 0; i < ZOO_MAX_REQUESTS; i++) {
    struct zoo_req* o = &c->reqs[i];
    if (o != r && o->state != REQ_FREE && o->seq < r->seq) return 0;
  }
  return 1;
}

static ncclResult_t test_locked(struct zoo_req* r, int* done, int* sizes) {
#ifdef ZOO_QUIRK_OLDEST_TEST
  if (!is_oldest(r)) {
    ZOO_WARN("zoo: test() of request %llu while an older one is outstanding on its comm", (unsigned long long)r->seq);
    return ncclInternalError;
  }
#else
  (void)is_oldest;
#endif
  ncclResult_t res = progress(r->comm);
  if (r->state == REQ_FAILED) {
    r->state = REQ_FREE;
    return res != ncclSuccess ? res : ncclSystemError;
  }
  if (res != ncclSuccess) return res;
  if (r->state != REQ_DONE) return ncclSuccess;
  *done = 1;
#ifdef ZOO_FAULT_NO_SIZES
  (void)sizes; /* Fault: the received size is never reported. */
#else
  if (sizes) {
#ifdef ZOO_FAULT_WRONG_SIZES
    sizes[0] = (int)(r->comm->is_send ? r->true_size : r->size);
#else
    sizes[0] = (int)r->true_size;
#endif
  }
#endif
#ifdef ZOO_QUIRK_GDR
  if (r->dev) {
    /* DMA write of the received bytes into device memory. */
    if (!r->comm->is_send && gdr_copy(r->dev, r->data, r->true_size, 1) != 0) {
      free(r->data);
      r->state = REQ_FREE;
      return ncclSystemError;
    }
    free(r->data);
  }
#endif
  r->state = REQ_FREE;
  return ncclSuccess;
}

static ncclResult_t zoo_test(void* request, int* done, int* sizes) {
  struct zoo_req* r = (struct zoo_req*)request;
  *done = 0;
  if (r == NULL || r->state == REQ_FREE) return ncclInternalError;
  struct zoo_comm* c = r->comm;
  LOCK(c);
  ncclResult_t res = test_locked(r, done, sizes);
  UNLOCK(c);
  return res;
}

static ncclResult_t close_comm(void* comm) {
  struct zoo_comm* c = (struct zoo_comm*)comm;
  if (c == NULL) return ncclSuccess;
#ifdef ZOO_QUIRK_THREADS
  LOCK(c);
  c->stop = 1;
  UNLOCK(c);
  pthread_join(c->helper, NULL);
  pthread_mutex_destroy(&c->lock);
#endif
#ifndef ZOO_FAULT_LEAK_FD
  close(c->fd);
#endif
  free(c);
  return ncclSuccess;
}

static ncclResult_t zoo_close_listen(void* listenComm) {
  struct zoo_listen* l = (struct zoo_listen*)listenComm;
  if (l == NULL) return ncclSuccess;
  if (l->pending_fd >= 0) close(l->pending_fd);
  close(l->fd);
  free(l);
  return ncclSuccess;
}

#ifdef ZOO_FAULT_NULL_NAME
#define ZOO_NAME NULL
#else
#define ZOO_NAME "Zoo"
#endif

/* One initializer for the internal table and the standalone export. */
#define ZOO_NET_INITIALIZER \
{ \
    .name = ZOO_NAME, \
    .init = zoo_init, \
    .devices = zoo_devices, \
    .getProperties = zoo_get_properties, \
    .listen = zoo_listen, \
    .connect = zoo_connect, \
    .accept = zoo_accept, \
    .regMr = zoo_reg_mr, \
    .regMrDmaBuf = zoo_reg_mr_dmabuf, \
    .deregMr = zoo_dereg_mr, \
    .isend = zoo_isend, \
    .irecv = zoo_irecv, \
    .iflush = zoo_iflush, \
    .test = zoo_test, \
    .closeSend = close_comm, \
    .closeRecv = close_comm, \
    .closeListen = zoo_close_listen, \
    .getDeviceMr = NULL, \
    .irecvConsumed = NULL, \
  }

__attribute__((unused)) static const ncclNet_v8_t zoo_net = ZOO_NET_INITIALIZER;

#if defined(ZOO_STANDALONE) && defined(ZOO_EXPORT_V12)
#include "zoo_v12.h"
#elif defined(ZOO_STANDALONE)
/* The whole plugin is this file: export the v8 table directly. */
__attribute__((visibility("default"))) const ncclNet_v8_t ncclNetPlugin_v8 = ZOO_NET_INITIALIZER;
#else
/* Defined (and exported) by the Rust cdylib: 152 bytes, 8-aligned. */
extern unsigned char ncclNetPlugin_v8[];

__attribute__((constructor)) static void zoo_publish_vtable(void) {
  memcpy(ncclNetPlugin_v8, &zoo_net, sizeof zoo_net);
}
#endif

_Static_assert(sizeof(ncclNet_v8_t) == 152, "ncclNet_v8_t is 152 bytes (reference §1.3)");
_Static_assert(sizeof(ncclNetProperties_v8_t) == 64, "ncclNetProperties_v8_t is 64 bytes (reference §1.2)");
_Static_assert(sizeof(struct zoo_handle) <= 128, "handle fits NCCL_NET_HANDLE_MAXSIZE");

/* Referenced from the Rust side so the linker keeps this object (and its constructor). */
void zoo_net_anchor(void) {}
