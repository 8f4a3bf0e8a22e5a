/* Net plugin bandwidth as NCCL drives it, against raw TCP (issue 36).
 *
 * A C host of two processes (fork) that drives any ncclNet_v12 plugin only
 * through its exported vtable (`ncclNetPlugin_v12`, dlopen'ed separately in
 * each process), the way NCCL 2.30.7's net transport does (src/transport/net.cc,
 * sendProxyProgress / recvProxyProgress):
 *   - init(ctx) once, listen/connect/accept on device 0, buffers registered
 *     once with regMr(NCCL_PTR_HOST) and reused; every isend/irecv passes its
 *     mhandle and a profiler step handle (phandle; the host's callback leaves
 *     the event NULL, as NCCL does with no profiler loaded);
 *   - one message per isend / irecv (n = 1, tag = the sender's rank);
 *   - each progress call of an op either posts one request (while fewer than W
 *     are in flight) or tests the OLDEST outstanding one; a NULL request from
 *     isend/irecv is retried on the next call; `test` is polled until done and
 *     the size it reports is checked;
 *   - default: process 0 sends, process 1 receives. With -d each process both
 *     sends and receives (a send comm and a recv comm), and its one thread calls
 *     the two ops' progress in turn, as NCCL's proxy thread walks a ring's send
 *     and receive ops (2-rank AllReduce).
 * Beside it, in the same run and paired with every plugin measurement (their
 * order alternating), raw TCP over loopback moves the same messages: one
 * stream (TCP_NODELAY, blocking write() of each message / read() until it is
 * complete); with -d one stream each way, written by a second thread.
 *
 * Each measurement moves `iters` messages of one size per direction; process 0
 * starts its clock when process 1 says it is ready (AF_UNIX socketpair) and
 * stops it when both are done (process 1 reports when all of its messages have
 * arrived). When the W buffers of a window fit in the memory cap, every message
 * carries its sequence number in its first and last 8 bytes and the receiver
 * checks them (plugin and raw).
 *
 * Output: one line per (size, in-flight) with the medians over rounds of
 * plugin and raw GB/s (1e9 B/s, per direction), the median of the per-round
 * ratios, the medians of the CPU time both processes used per GB moved (user +
 * system, getrusage; what decides throughput when the cores are shared), then
 * the per-round ratios. With -c FILE, every sample as CSV.
 *
 * Usage: net_plugin_bw -p PLUGIN.so [-b 4K] [-e 64M] [-f 2] [-w 1,8,32]
 *                      [-r 5] [-t 256M] [-m 512M] [-c FILE] [-k plugin|raw] [-d]
 *   -b/-e/-f  smallest, largest message size and the step factor
 *   -w        requests in flight, comma-separated (each 1..32)
 *   -r        rounds (the sweep is repeated; each round pairs plugin and raw)
 *   -t        bytes per measurement: iters = clamp(t / size, max(8, 2W), 8192)
 *   -m        buffer bytes per direction and process (W > m / size reuses
 *             buffers of messages in flight: then no stamp check)
 *   -k        plugin | raw: run only that side (profiling; ratios print as nan)
 *   -d        both directions at once (see above)
 * Environment: the plugin's own (NCCL_SOCKET_IFNAME, ...); NCCL_DEBUG=INFO
 * prints the plugin's INFO lines. benchmarks/net_plugin_bw.sh builds and runs it.
 * Build: cc -O2 -std=c11 -D_GNU_SOURCE -pthread -o net_plugin_bw net_plugin_bw.c -ldl -lm
 * Layout of ncclNet_v12_t and ncclNetProperties_v12_t: NCCL 2.30.7
 * src/include/plugin/net/net_v12.h (checked by the static asserts below). */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- the ABI */

enum { NCCL_PTR_HOST = 1, NET_HANDLE_MAXSIZE = 128, MAX_REQUESTS = 32 };

typedef void (*logger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);
typedef int (*prof_cb_t)(void** eHandle, int type, void* pHandle, int64_t pluginId, void* extData);

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
  int trafficClass;
} commcfg_v12_t;

typedef struct {
  const char* name;
  int (*init)(void** ctx, uint64_t commId, commcfg_v12_t* config, logger_t log, prof_cb_t prof);
  int (*devices)(int* ndev);
  int (*getProperties)(int dev, props_v12_t* props);
  int (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  int (*connect)(void* ctx, int dev, void* handle, void** sendComm, void** sendDevComm);
  int (*accept)(void* listenComm, void** recvComm, void** recvDevComm);
  int (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  void* regMrDmaBuf;
  int (*deregMr)(void* comm, void* mhandle);
  int (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request);
  int (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
               void** request);
  void* iflush;
  int (*test)(void* request, int* done, int* sizes);
  int (*closeSend)(void* sendComm);
  int (*closeRecv)(void* recvComm);
  int (*closeListen)(void* listenComm);
  void* getDeviceMr;
  void* irecvConsumed;
  void* makeVDevice;
  int (*finalize)(void* ctx);
  void* setNetAttr;
} net_v12_t;

_Static_assert(sizeof(props_v12_t) == 128, "ncclNetProperties_v12_t is 128 bytes");
_Static_assert(offsetof(props_v12_t, maxP2pBytes) == 104, "maxP2pBytes at 104");
_Static_assert(sizeof(net_v12_t) == 176, "ncclNet_v12_t is 176 bytes");
_Static_assert(offsetof(net_v12_t, isend) == 80, "isend at 80");
_Static_assert(offsetof(net_v12_t, test) == 104, "test at 104");
_Static_assert(offsetof(net_v12_t, finalize) == 160, "finalize at 160");

/* ---------------------------------------------------------------- helpers */

static int me; /* 0 = sender (parent), 1 = receiver (child) */
static int debug_info;

static void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "net_plugin_bw[%s]: ", me ? "recv" : "send");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

#define NETCHECK(call)                                                        \
  do {                                                                        \
    int r_ = (call);                                                          \
    if (r_ != 0) die("%s returned ncclResult_t %d (expected 0)", #call, r_); \
  } while (0)

static void logger(int level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  (void)flags;
  (void)file;
  (void)line;
  /* ncclDebugLogLevel: 2 = WARN (always shown), 3 = INFO (with NCCL_DEBUG=INFO) */
  if (level != 2 && !(debug_info && level == 3)) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[%s] ", me ? "recv" : "send");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* NCCL's callback with no profiler plugin loaded: no event (NULL handle). */
static int prof_cb(void** eHandle, int type, void* pHandle, int64_t pluginId, void* extData) {
  (void)pHandle;
  (void)pluginId;
  (void)extData;
  if (type == 0) *eHandle = NULL;
  return 0;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* CPU seconds (user + system) this process has used. */
static double cpu_s(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

static void full_write(int fd, const void* p, size_t n) {
  const char* c = p;
  while (n > 0) {
    ssize_t k = write(fd, c, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) die("write on fd %d: %s", fd, k < 0 ? strerror(errno) : "wrote 0 bytes");
    c += k;
    n -= (size_t)k;
  }
}

static void full_read(int fd, void* p, size_t n) {
  char* c = p;
  while (n > 0) {
    ssize_t k = read(fd, c, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) die("read on fd %d: %s", fd, k < 0 ? strerror(errno) : "peer closed the connection");
    c += k;
    n -= (size_t)k;
  }
}

static size_t parse_size(const char* s) {
  char* end;
  double v = strtod(s, &end);
  switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    case '\0': break;
    default: die("bad size '%s' (expected a number with an optional K/M/G suffix)", s);
  }
  if (v < 1) die("bad size '%s' (expected at least 1 byte)", s);
  return (size_t)v;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(const double* v, int n) {
  double s[256];
  memcpy(s, v, (size_t)n * sizeof(double));
  qsort(s, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* ---------------------------------------------------------------- the run */

typedef struct {
  int kind; /* 0 = quit, 1 = plugin, 2 = raw */
  int window;
  uint64_t size;
  uint64_t iters;
} job_t;

/* One direction of one process: a comm, its registered buffers, its raw stream. */
typedef struct {
  void* comm;   /* sendComm or recvComm; NULL when this process does not use the direction */
  void* mh;     /* the buffers' registration */
  char* arena;
  int raw;      /* the raw TCP stream of this direction */
} dir_t;

typedef struct {
  net_v12_t* net;
  void* ctx;
  dir_t tx, rx;
  size_t cap;   /* bytes of each arena */
  int ctl;      /* AF_UNIX to the peer */
} host_t;

/* Progress state of one op (NCCL: a ncclProxySubArgs of one connection). */
typedef struct {
  uint64_t posted, done;
  void* req[MAX_REQUESTS];
  void* phandle[MAX_REQUESTS]; /* NCCL: sub->pHandles[step % NCCL_STEPS] */
  size_t nslots;
  int check;
} op_t;

static void op_init(op_t* op, const host_t* h, const job_t* j) {
  memset(op, 0, sizeof *op);
  size_t fit = h->cap / j->size;
  op->nslots = fit < (size_t)j->window ? fit : (size_t)j->window;
  if (op->nslots == 0) die("message size %llu exceeds the memory cap %zu", (unsigned long long)j->size, h->cap);
  op->check = op->nslots >= (size_t)j->window; /* else buffers of messages in flight alias */
}

static void stamp(char* b, size_t size, uint64_t seq) {
  memcpy(b, &seq, 8);
  memcpy(b + size - 8, &seq, 8);
}

static void check_stamp(const char* b, size_t size, uint64_t seq, const char* what) {
  uint64_t a, z;
  memcpy(&a, b, 8);
  memcpy(&z, b + size - 8, 8);
  if (a != seq || z != seq)
    die("%s message %llu of %zu bytes arrived with stamps %llu/%llu (expected %llu in its first and last 8 bytes)", what,
        (unsigned long long)seq, size, (unsigned long long)a, (unsigned long long)z, (unsigned long long)seq);
}

/* One call of NCCL's sendProxyProgress for one sub: post the next isend if a
 * step is free, else test the oldest request in flight. */
static void send_step(host_t* h, const job_t* j, op_t* op) {
  uint64_t w = (uint64_t)j->window;
  if (op->posted < j->iters && op->posted < op->done + w) {
    char* b = h->tx.arena + (op->posted % op->nslots) * j->size;
    if (op->check) stamp(b, j->size, op->posted);
    int s = (int)(op->posted % w);
    NETCHECK(h->net->isend(h->tx.comm, b, j->size, me, h->tx.mh, &op->phandle[s], &op->req[s]));
    if (op->req[s] != NULL) {
      op->posted++;
      return;
    }
  }
  if (op->done < op->posted) {
    int d = 0, sz = -1;
    NETCHECK(h->net->test(op->req[op->done % w], &d, &sz));
    if (d) {
      if ((size_t)sz != j->size)
        die("test of send %llu reported %d bytes (expected %llu)", (unsigned long long)op->done, sz,
            (unsigned long long)j->size);
      op->done++;
    }
  }
}

/* One call of NCCL's recvProxyProgress for one sub (n = 1; host memory needs
 * no iflush): post the next irecv if a step is free, else test the oldest. */
static void recv_step(host_t* h, const job_t* j, op_t* op) {
  uint64_t w = (uint64_t)j->window;
  if (op->posted < j->iters && op->posted < op->done + w) {
    void* data = h->rx.arena + (op->posted % op->nslots) * j->size;
    size_t size = j->size;
    int tag = 1 - me; /* the sender's rank */
    int s = (int)(op->posted % w);
    void* ph = &op->phandle[s];
    NETCHECK(h->net->irecv(h->rx.comm, 1, &data, &size, &tag, &h->rx.mh, &ph, &op->req[s]));
    if (op->req[s] != NULL) {
      op->posted++;
      return;
    }
  }
  if (op->done < op->posted) {
    int d = 0, sz = -1;
    NETCHECK(h->net->test(op->req[op->done % w], &d, &sz));
    if (d) {
      if ((size_t)sz != j->size)
        die("test of receive %llu reported %d bytes (expected %llu)", (unsigned long long)op->done, sz,
            (unsigned long long)j->size);
      if (op->check) check_stamp(h->rx.arena + (op->done % op->nslots) * j->size, j->size, op->done, "plugin");
      op->done++;
    }
  }
}

/* The plugin side of a measurement: one thread progresses this process's ops
 * in turn, as NCCL's proxy thread walks its active ops. */
static void plugin_run(host_t* h, const job_t* j) {
  op_t so, ro;
  op_init(&so, h, j);
  op_init(&ro, h, j);
  int tx = h->tx.comm != NULL, rx = h->rx.comm != NULL;
  while ((tx && so.done < j->iters) || (rx && ro.done < j->iters)) {
    if (tx && so.done < j->iters) send_step(h, j, &so);
    if (rx && ro.done < j->iters) recv_step(h, j, &ro);
  }
}

static void raw_send(host_t* h, const job_t* j) {
  op_t op;
  op_init(&op, h, j);
  for (uint64_t i = 0; i < j->iters; i++) {
    char* b = h->tx.arena + (i % op.nslots) * j->size;
    if (op.check) stamp(b, j->size, i);
    full_write(h->tx.raw, b, j->size);
  }
}

static void raw_recv(host_t* h, const job_t* j) {
  op_t op;
  op_init(&op, h, j);
  for (uint64_t i = 0; i < j->iters; i++) {
    char* b = h->rx.arena + (i % op.nslots) * j->size;
    full_read(h->rx.raw, b, j->size);
    if (op.check) check_stamp(b, j->size, i, "raw");
  }
}

typedef struct {
  host_t* h;
  const job_t* j;
} raw_arg_t;

static void* raw_send_thread(void* a) {
  raw_arg_t* r = a;
  raw_send(r->h, r->j);
  return NULL;
}

/* The raw side: blocking write/read; both directions at once (-d) with a
 * writer thread beside the reading main thread, raw TCP at its best. */
static void raw_run(host_t* h, const job_t* j) {
  int tx = h->tx.raw >= 0, rx = h->rx.raw >= 0;
  if (tx && rx) {
    pthread_t t;
    raw_arg_t a = {h, j};
    if (pthread_create(&t, NULL, raw_send_thread, &a) != 0) die("pthread_create failed");
    raw_recv(h, j);
    pthread_join(t, NULL);
  } else if (tx) {
    raw_send(h, j);
  } else {
    raw_recv(h, j);
  }
}

/* The second process: runs each job it is sent until told to quit. */
static void follower(host_t* h) {
  for (;;) {
    job_t j;
    full_read(h->ctl, &j, sizeof j);
    if (j.kind == 0) return;
    alarm(120); /* a measurement that hangs ends the run with SIGALRM */
    full_write(h->ctl, "R", 1);
    double c0 = cpu_s();
    if (j.kind == 1) plugin_run(h, &j);
    else raw_run(h, &j);
    double cpu = cpu_s() - c0;
    full_write(h->ctl, &cpu, sizeof cpu); /* also says: all of its messages arrived */
    alarm(0);
  }
}

/* One measurement, led by the first process: GB/s per direction (1e9 B/s);
 * *cpu = CPU seconds of both processes together per GB moved in all directions. */
static double measure(host_t* h, const job_t* j, int ndirs, double* cpu) {
  char c;
  double fcpu;
  alarm(120);
  full_write(h->ctl, j, sizeof *j);
  full_read(h->ctl, &c, 1);
  double t0 = now_s(), c0 = cpu_s();
  if (j->kind == 1) plugin_run(h, j);
  else raw_run(h, j);
  full_read(h->ctl, &fcpu, sizeof fcpu);
  double t = now_s() - t0, lcpu = cpu_s() - c0;
  alarm(0);
  double gb = (double)j->size * (double)j->iters / 1e9;
  *cpu = (lcpu + fcpu) / (gb * ndirs);
  return gb / t;
}

/* Raw TCP: a loopback listener, its port. */
static int raw_listen(int* port) {
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || bind(fd, (struct sockaddr*)&a, sizeof a) != 0 || listen(fd, 4) != 0 ||
      getsockname(fd, (struct sockaddr*)&a, &al) != 0)
    die("raw TCP listen: %s", strerror(errno));
  *port = ntohs(a.sin_port);
  return fd;
}

static int raw_accept(int lfd) {
  int one = 1, fd = accept(lfd, NULL, NULL);
  if (fd < 0) die("accept of a raw TCP stream: %s", strerror(errno));
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

static int raw_connect(int port) {
  int one = 1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, (struct sockaddr*)&a, sizeof a) != 0) die("raw TCP connect: %s", strerror(errno));
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

static char* new_arena(size_t len) {
  char* a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (a == MAP_FAILED) die("mmap of %zu bytes: %s", len, strerror(errno));
  memset(a, 1, len); /* no page fault inside a measurement */
  return a;
}

/* Connects this process's directions: the plugin comms (listen/accept for the
 * receiving side, connect for the sending side, progressed together as NCCL's
 * proxy does), then the raw streams, then registers the buffers. */
static void establish(host_t* h, int bidir) {
  int send = bidir || me == 0, recv = bidir || me == 1;
  char handle[NET_HANDLE_MAXSIZE], peer[NET_HANDLE_MAXSIZE];
  void* lcomm = NULL;
  void* dev = NULL;
  int lraw = -1, port = 0, peer_port = 0;
  memset(handle, 0, sizeof handle);
  if (recv) {
    NETCHECK(h->net->listen(h->ctx, 0, handle, &lcomm));
    lraw = raw_listen(&port);
  }
  /* Both processes write, then read: the socketpair buffers 132 bytes each way. */
  full_write(h->ctl, handle, sizeof handle);
  full_write(h->ctl, &port, sizeof port);
  full_read(h->ctl, peer, sizeof peer);
  full_read(h->ctl, &peer_port, sizeof peer_port);
  alarm(120);
  while ((send && h->tx.comm == NULL) || (recv && h->rx.comm == NULL)) {
    if (send && h->tx.comm == NULL) NETCHECK(h->net->connect(h->ctx, 0, peer, &h->tx.comm, &dev));
    if (recv && h->rx.comm == NULL) NETCHECK(h->net->accept(lcomm, &h->rx.comm, &dev));
  }
  h->tx.raw = h->rx.raw = -1;
  /* Process 0 connects first, so the two accepts cannot cross. */
  for (int turn = 0; turn < 2; turn++) {
    if (turn == me && send) h->tx.raw = raw_connect(peer_port);
    if (turn != me && recv) h->rx.raw = raw_accept(lraw);
  }
  alarm(0);
  if (recv) {
    NETCHECK(h->net->closeListen(lcomm));
    close(lraw);
  }
  if (send) {
    h->tx.arena = new_arena(h->cap);
    NETCHECK(h->net->regMr(h->tx.comm, h->tx.arena, h->cap, NCCL_PTR_HOST, &h->tx.mh));
  }
  if (recv) {
    h->rx.arena = new_arena(h->cap);
    NETCHECK(h->net->regMr(h->rx.comm, h->rx.arena, h->cap, NCCL_PTR_HOST, &h->rx.mh));
  }
}

static void teardown(host_t* h) {
  if (h->tx.comm) {
    NETCHECK(h->net->deregMr(h->tx.comm, h->tx.mh));
    NETCHECK(h->net->closeSend(h->tx.comm));
    close(h->tx.raw);
  }
  if (h->rx.comm) {
    NETCHECK(h->net->deregMr(h->rx.comm, h->rx.mh));
    NETCHECK(h->net->closeRecv(h->rx.comm));
    close(h->rx.raw);
  }
  NETCHECK(h->net->finalize(h->ctx));
}

int main(int argc, char** argv) {
  const char* plugin = NULL;
  const char* csv = NULL;
  size_t minb = 4096, maxb = 64u << 20, per = 256u << 20, cap = 512u << 20;
  int factor = 2, rounds = 5, nw = 0, windows[8], bidir = 0, only = 0; /* only: 1 = plugin, 2 = raw */
  const char* wlist = "1,8,32";
  int opt;
  while ((opt = getopt(argc, argv, "p:b:e:f:w:r:t:m:c:k:d")) != -1) {
    switch (opt) {
      case 'p': plugin = optarg; break;
      case 'b': minb = parse_size(optarg); break;
      case 'e': maxb = parse_size(optarg); break;
      case 'f': factor = atoi(optarg); break;
      case 'w': wlist = optarg; break;
      case 'r': rounds = atoi(optarg); break;
      case 't': per = parse_size(optarg); break;
      case 'm': cap = parse_size(optarg); break;
      case 'c': csv = optarg; break;
      case 'k': only = !strcmp(optarg, "plugin") ? 1 : !strcmp(optarg, "raw") ? 2 : -1; break;
      case 'd': bidir = 1; break;
      default:
        die("usage: net_plugin_bw -p PLUGIN.so [-b MIN] [-e MAX] [-f FACTOR] [-w W,W,..] [-r ROUNDS] [-t BYTES] "
            "[-m CAP] [-c CSV] [-k plugin|raw] [-d]");
    }
  }
  if (!plugin) die("-p PLUGIN.so is required");
  if (only < 0) die("-k takes plugin or raw");
  if (factor < 2 || rounds < 1 || rounds > 256) die("expected -f >= 2 and 1 <= -r <= 256");
  if (minb < 16 || maxb < minb) die("expected 16 <= -b <= -e (messages carry 8-byte stamps at both ends)");
  for (char *w = strdup(wlist), *tok = strtok(w, ","); tok; tok = strtok(NULL, ",")) {
    int v = atoi(tok);
    if (v < 1 || v > MAX_REQUESTS || nw == 8)
      die("bad in-flight list '%s' (up to 8 values, each 1..%d)", wlist, MAX_REQUESTS);
    windows[nw++] = v;
  }
  const char* dbg = getenv("NCCL_DEBUG");
  debug_info = dbg && (!strcmp(dbg, "INFO") || !strcmp(dbg, "TRACE"));

  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) die("socketpair: %s", strerror(errno));
  pid_t child = fork();
  if (child < 0) die("fork: %s", strerror(errno));
  me = child == 0;
  if (me) prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the first process */
  host_t h = {.ctl = sv[me ? 1 : 0], .cap = cap};
  close(sv[me ? 0 : 1]);

  void* lib = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
  if (!lib) die("dlopen %s: %s", plugin, dlerror());
  h.net = dlsym(lib, "ncclNetPlugin_v12");
  if (!h.net) die("%s has no ncclNetPlugin_v12 symbol", plugin);
  commcfg_v12_t cfg = {.trafficClass = -1};
  NETCHECK(h.net->init(&h.ctx, 0x36, &cfg, logger, prof_cb));
  int ndev = 0;
  NETCHECK(h.net->devices(&ndev));
  if (ndev < 1) die("the plugin reports %d devices (expected at least 1)", ndev);
  props_v12_t props;
  memset(&props, 0, sizeof props);
  NETCHECK(h.net->getProperties(0, &props));
  if (!(props.ptrSupport & NCCL_PTR_HOST)) die("device 0 lacks NCCL_PTR_HOST");
  establish(&h, bidir);

  if (me) {
    follower(&h);
    teardown(&h);
    return 0;
  }
  int nsizes = 0;
  for (size_t s = minb; s <= maxb; s *= (size_t)factor) nsizes++;
  size_t npts = (size_t)nsizes * (size_t)nw;
  double* pg = calloc(npts * (size_t)rounds, sizeof(double)); /* plugin GB/s */
  double* rg = calloc(npts * (size_t)rounds, sizeof(double)); /* raw GB/s */
  double* pc = calloc(npts * (size_t)rounds, sizeof(double)); /* plugin CPU s/GB */
  double* rc = calloc(npts * (size_t)rounds, sizeof(double)); /* raw CPU s/GB */
  uint64_t* it = calloc(npts, sizeof(uint64_t));
  FILE* cf = NULL;
  if (csv) {
    cf = fopen(csv, "w");
    if (!cf) die("cannot write %s: %s", csv, strerror(errno));
    fprintf(cf, "round,size_bytes,inflight,iters,plugin_gbps,raw_gbps,ratio,plugin_cpu_s_per_gb,raw_cpu_s_per_gb\n");
  }
  printf("# net_plugin_bw: %s (%s, device 0 = %s), %s, %d rounds, plugin and raw TCP paired, order alternating\n",
         plugin, h.net->name, props.name ? props.name : "?",
         bidir ? "both directions at once (GB/s per direction)" : "one direction", rounds);
  fflush(stdout);
  for (int r = 0; r < rounds; r++) {
    int si = 0;
    for (size_t s = minb; s <= maxb; s *= (size_t)factor, si++) {
      for (int wi = 0; wi < nw; wi++) {
        job_t j = {.window = windows[wi], .size = s};
        uint64_t iters = per / s, lo = (uint64_t)(2 * windows[wi] > 8 ? 2 * windows[wi] : 8);
        j.iters = iters < lo ? lo : iters > 8192 ? 8192 : iters;
        size_t pt = (size_t)si * (size_t)nw + (size_t)wi, k = pt * (size_t)rounds + (size_t)r;
        it[pt] = j.iters;
        int plugin_first = (r + si + wi) % 2 == 0;
        for (int o = 0; o < 2; o++) {
          j.kind = (o == 0) == plugin_first ? 1 : 2;
          double cpu = NAN;
          double g = only && only != j.kind ? NAN : measure(&h, &j, bidir ? 2 : 1, &cpu);
          if (j.kind == 1) pg[k] = g, pc[k] = cpu;
          else rg[k] = g, rc[k] = cpu;
        }
        if (cf)
          fprintf(cf, "%d,%zu,%d,%llu,%.4f,%.4f,%.4f,%.4f,%.4f\n", r, s, windows[wi], (unsigned long long)j.iters,
                  pg[k], rg[k], pg[k] / rg[k], pc[k], rc[k]);
      }
    }
  }
  job_t quit = {0};
  full_write(h.ctl, &quit, sizeof quit);
  printf("%10s %8s %6s %12s %12s %7s %10s %10s  %s\n", "size", "inflight", "iters", "plugin_GB/s", "raw_GB/s", "ratio",
         "p_cpu_s/GB", "r_cpu_s/GB", "per-round ratios");
  int si = 0;
  for (size_t s = minb; s <= maxb; s *= (size_t)factor, si++) {
    for (int wi = 0; wi < nw; wi++) {
      size_t pt = (size_t)si * (size_t)nw + (size_t)wi, k = pt * (size_t)rounds;
      double rat[256];
      for (int r = 0; r < rounds; r++) rat[r] = pg[k + (size_t)r] / rg[k + (size_t)r];
      printf("%10zu %8d %6llu %12.3f %12.3f %7.2f %10.3f %10.3f ", s, windows[wi], (unsigned long long)it[pt],
             median(pg + k, rounds), median(rg + k, rounds), median(rat, rounds), median(pc + k, rounds),
             median(rc + k, rounds));
      for (int r = 0; r < rounds; r++) printf(" %.2f", rat[r]);
      printf("\n");
    }
  }
  if (cf) fclose(cf);
  teardown(&h);
  int st = 0;
  if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    die("the second process failed (wait status %d)", st);
  return 0;
}
