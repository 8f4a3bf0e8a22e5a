/* A recording profiler plugin for ferroccl's tests: ncclProfiler_v<PROF_VERSION>,
 * written from the layout tables of docs/reference/nccl-plugin-abi.md §3.2
 * (independent of ferroccl's Rust definitions). Every call is appended as one
 * line to $PROFREC_DIR/rec-<pid>.log; see src/lib.rs for the format. */
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#ifndef PROF_VERSION
#error "PROF_VERSION must be 1..6"
#endif

typedef void (*logger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

#define S(x) #x
#define XS(x) S(x)

#if PROF_VERSION <= 4
typedef uint8_t type_t;
#else
typedef uint64_t type_t;
#endif

struct proxy_op { pid_t pid; uint8_t channelId; int peer; int nSteps; int chunkSize; int isSend; };
struct proxy_step { int step; };
struct net_plugin { int64_t id; void* data; };

typedef struct {
  type_t type;
  void* parentObj;
  int rank;
  union {
#if PROF_VERSION == 1
    struct { const char* name; uint64_t commHash; uint64_t seqNumber; uint8_t func; void const* sendBuff; void* recvBuff;
             size_t count; int root; uint8_t datatype; uint32_t op; size_t trafficBytes; uint8_t nMaxChannels;
             uint8_t nWarps; uint8_t algo; uint8_t proto; int isCollnet; int isNvls; } coll;
    struct { const char* name; uint64_t commHash; uint8_t func; void* buff; uint8_t datatype; size_t count; int peer; } p2p;
#elif PROF_VERSION == 2
    struct { const char* name; uint64_t commHash; uint64_t seqNumber; const char* func; void const* sendBuff; void* recvBuff;
             size_t count; int root; const char* datatype; size_t trafficBytes; uint8_t nMaxChannels; uint8_t nWarps;
             const char* algo; const char* proto; } coll;
    struct { const char* name; uint64_t commHash; const char* func; void* buff; const char* datatype; size_t count; int peer; } p2p;
#elif PROF_VERSION == 3
    struct { const char* name; uint64_t commHash; uint64_t seqNumber; const char* func; void const* sendBuff; void* recvBuff;
             size_t count; int root; const char* datatype; uint8_t nMaxChannels; uint8_t nWarps;
             const char* algo; const char* proto; } coll;
    struct { const char* name; uint64_t commHash; const char* func; void* buff; const char* datatype; size_t count; int peer; } p2p;
    struct { uint8_t channelId; } kernelCh;
    struct net_plugin netPlugin;
#else
#if PROF_VERSION >= 5
    struct { bool graphCaptured; int groupDepth; } groupApi;
    struct { const char* func; size_t count; const char* datatype; int root; void* stream; bool graphCaptured; } collApi;
    struct { const char* func; size_t count; const char* datatype; void* stream; bool graphCaptured; } p2pApi;
    struct { void* stream; } kernelLaunch;
#endif
    struct { uint64_t seqNumber; const char* func; void const* sendBuff; void* recvBuff; size_t count; int root;
             const char* datatype; uint8_t nChannels; uint8_t nWarps; const char* algo; const char* proto;
#if PROF_VERSION >= 5
             void* parentGroup;
#endif
    } coll;
    struct { const char* func; void* buff; const char* datatype; size_t count; int peer; uint8_t nChannels;
#if PROF_VERSION >= 5
             void* parentGroup;
#endif
    } p2p;
    struct { uint8_t channelId; uint64_t pTimer; } kernelCh;
    struct net_plugin netPlugin;
#endif
    struct proxy_op proxyOp;
    struct proxy_step proxyStep;
  };
} descr_t;

#if PROF_VERSION <= 3
typedef union { struct { size_t transSize; int steps; } proxyOp; struct { int appendedProxyOps; } proxyCtrl; } state_args_t;
#else
typedef union {
  struct { size_t transSize; } proxyStep;
  struct { int appendedProxyOps; } proxyCtrl;
  struct { void* data; } netPlugin;
  struct { uint64_t pTimer; } kernelCh;
} state_args_t;
#endif

/* Layout checks against the reference (LP64). */
#if PROF_VERSION == 1
_Static_assert(sizeof(descr_t) == 120, "v1 size");
_Static_assert(offsetof(descr_t, coll.isNvls) == 112, "v1 isNvls");
#elif PROF_VERSION == 2
_Static_assert(sizeof(descr_t) == 128, "v2 size");
_Static_assert(offsetof(descr_t, coll.proto) == 120, "v2 proto");
#elif PROF_VERSION == 3
_Static_assert(sizeof(descr_t) == 120, "v3 size");
_Static_assert(offsetof(descr_t, netPlugin.data) == 32, "v3 netPlugin");
#elif PROF_VERSION == 4
_Static_assert(sizeof(descr_t) == 104, "v4 size");
_Static_assert(offsetof(descr_t, p2p.nChannels) == 60, "v4 p2p.nChannels");
#else
_Static_assert(sizeof(descr_t) == 112, "v5/v6 size");
_Static_assert(offsetof(descr_t, coll.parentGroup) == 104, "v5 parentGroup");
_Static_assert(offsetof(descr_t, p2p.parentGroup) == 64, "v5 p2p parentGroup");
#endif
_Static_assert(offsetof(descr_t, proxyOp.isSend) == 44, "proxyOp.isSend");

#define MAGIC 0x50524543u
typedef struct { uint32_t magic; uint64_t id; } rec_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static FILE* out;
static uint64_t next_id = 1;
static int mask_env = -1;

static void emit(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static void emit(const char* fmt, ...) {
  pthread_mutex_lock(&mu);
  if (out) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fputc('\n', out);
    fflush(out);
  }
  pthread_mutex_unlock(&mu);
}

__attribute__((unused)) static const char* str(const char* s) { return s ? s : "(null)"; }

static uint64_t id_of(void* p, int* known) {
  *known = 1;
  if (!p) return 0;
  rec_t* r = (rec_t*)p;
  if (r->magic != MAGIC) { *known = 0; return 0; }
  return r->id;
}

static int open_log(void) {
  pthread_mutex_lock(&mu);
  if (!out) {
    const char* d = getenv("PROFREC_DIR");
    if (d) {
      char path[4096];
      snprintf(path, sizeof path, "%s/rec-%d.log", d, (int)getpid());
      out = fopen(path, "a");
    }
    const char* m = getenv("PROFREC_MASK");
    if (m) mask_env = atoi(m);
  }
  pthread_mutex_unlock(&mu);
  return 0;
}

static int known_mask(void) {
#if PROF_VERSION <= 2
  return 0x3f;
#elif PROF_VERSION <= 4
  return 0xff;
#elif PROF_VERSION == 5
  return 0xfff;
#else
  return 0x7fff;
#endif
}

static int ctx_token;

static int common_init(void** ctx, int* mask, int nnodes, int nranks, int rank, uint64_t id) {
  open_log();
  *mask = mask_env >= 0 ? mask_env : known_mask();
  *ctx = &ctx_token;
  emit("init v=%d rank=%d nranks=%d nnodes=%d commId=%llx mask=%d", PROF_VERSION, rank, nranks, nnodes,
       (unsigned long long)id, *mask);
  return 0;
}

#if PROF_VERSION <= 3
static int init(void** ctx, int* mask) { return common_init(ctx, mask, -1, -1, -1, 0); }
#elif PROF_VERSION == 4
static int init(void** ctx, int* mask, const char* name, uint64_t hash, int nnodes, int nranks, int rank, logger_t log) {
  (void)name; (void)log;
  return common_init(ctx, mask, nnodes, nranks, rank, hash);
}
#else
static int init(void** ctx, uint64_t id, int* mask, const char* name, int nnodes, int nranks, int rank, logger_t log) {
  (void)name; (void)log;
  return common_init(ctx, mask, nnodes, nranks, rank, id);
}
#endif

static int start(void* ctx, void** h, descr_t* d) {
  if (ctx != &ctx_token) return 3; /* ncclInternalError */
  rec_t* r = calloc(1, sizeof *r);
  r->magic = MAGIC;
  pthread_mutex_lock(&mu);
  r->id = next_id++;
  pthread_mutex_unlock(&mu);
  *h = r;
  int known;
  uint64_t parent = id_of(d->parentObj, &known);
  char pbuf[32];
  if (known) snprintf(pbuf, sizeof pbuf, "%llu", (unsigned long long)parent);
  else snprintf(pbuf, sizeof pbuf, "?");
  char f[512] = "";
  uint64_t t = d->type;
  switch (t) {
#if PROF_VERSION == 1
    case 2: snprintf(f, sizeof f, "seq=%llu func=%d algo=%d proto=%d count=%zu dtype=%d nch=%d root=%d",
                     (unsigned long long)d->coll.seqNumber, d->coll.func, d->coll.algo, d->coll.proto, d->coll.count,
                     d->coll.datatype, d->coll.nMaxChannels, d->coll.root); break;
    case 4: snprintf(f, sizeof f, "func=%d peer=%d count=%zu dtype=%d", d->p2p.func, d->p2p.peer, d->p2p.count,
                     d->p2p.datatype); break;
#elif PROF_VERSION <= 3
    case 2: snprintf(f, sizeof f, "seq=%llu func=%s algo=%s proto=%s count=%zu dtype=%s nch=%d root=%d",
                     (unsigned long long)d->coll.seqNumber, str(d->coll.func), str(d->coll.algo), str(d->coll.proto),
                     d->coll.count, str(d->coll.datatype), d->coll.nMaxChannels, d->coll.root); break;
    case 4: snprintf(f, sizeof f, "func=%s peer=%d count=%zu dtype=%s", str(d->p2p.func), d->p2p.peer, d->p2p.count,
                     str(d->p2p.datatype)); break;
#else
    case 2: {
      int k2; uint64_t pg = 0;
#if PROF_VERSION >= 5
      pg = id_of(d->coll.parentGroup, &k2);
#else
      k2 = 1;
#endif
      snprintf(f, sizeof f, "seq=%llu func=%s algo=%s proto=%s count=%zu dtype=%s nch=%d root=%d group=%llu%s",
               (unsigned long long)d->coll.seqNumber, str(d->coll.func), str(d->coll.algo), str(d->coll.proto),
               d->coll.count, str(d->coll.datatype), d->coll.nChannels, d->coll.root, (unsigned long long)pg,
               k2 ? "" : "?");
      break;
    }
    case 4: {
      int k2; uint64_t pg = 0;
#if PROF_VERSION >= 5
      pg = id_of(d->p2p.parentGroup, &k2);
#else
      k2 = 1;
#endif
      snprintf(f, sizeof f, "func=%s peer=%d count=%zu dtype=%s nch=%d group=%llu%s", str(d->p2p.func), d->p2p.peer,
               d->p2p.count, str(d->p2p.datatype), d->p2p.nChannels, (unsigned long long)pg, k2 ? "" : "?");
      break;
    }
#endif
    case 8: snprintf(f, sizeof f, "ch=%d peer=%d nsteps=%d chunk=%d send=%d pidok=%d", d->proxyOp.channelId,
                     d->proxyOp.peer, d->proxyOp.nSteps, d->proxyOp.chunkSize, d->proxyOp.isSend,
                     d->proxyOp.pid == getpid()); break;
    case 16: snprintf(f, sizeof f, "step=%d", d->proxyStep.step); break;
#if PROF_VERSION >= 3
    case 128: {
      /* The built-in descriptors (net_ib_v1.h, net_socket_v1.h): type (uint8_t) at 0,
       * the union at 8. IB qp: int device, (pad) uint64_t wr_id, int opcode, int qpNum,
       * size_t length; socket: int fd, int op, size_t length. */
      long long id = (long long)d->netPlugin.id;
      const unsigned char* x = d->netPlugin.data;
      if (x && id == ((1 << 16) | 1)) {
        int dev, op, qp; uint64_t wr; size_t len;
        memcpy(&dev, x + 8, 4); memcpy(&wr, x + 16, 8); memcpy(&op, x + 24, 4); memcpy(&qp, x + 28, 4);
        memcpy(&len, x + 32, 8);
        snprintf(f, sizeof f, "netid=%lld ntype=%d dev=%d wr=%llu op=%d qp=%d len=%zu", id, x[0], dev,
                 (unsigned long long)wr, op, qp, len);
      } else if (x && id == ((2 << 16) | 1)) {
        int fd, op; size_t len;
        memcpy(&fd, x + 8, 4); memcpy(&op, x + 12, 4); memcpy(&len, x + 16, 8);
        snprintf(f, sizeof f, "netid=%lld ntype=%d fd=%d op=%d len=%zu", id, x[0], fd, op, len);
      } else {
        snprintf(f, sizeof f, "netid=%lld", id);
      }
      break;
    }
#endif
#if PROF_VERSION >= 5
    case 256: snprintf(f, sizeof f, "depth=%d", d->groupApi.groupDepth); break;
    case 512: snprintf(f, sizeof f, "func=%s count=%zu dtype=%s root=%d", str(d->collApi.func), d->collApi.count,
                       str(d->collApi.datatype), d->collApi.root); break;
    case 1024: snprintf(f, sizeof f, "func=%s count=%zu dtype=%s", str(d->p2pApi.func), d->p2pApi.count,
                        str(d->p2pApi.datatype)); break;
#endif
    default: break;
  }
  emit("start id=%llu type=%llu parent=%s rank=%d %s", (unsigned long long)r->id, (unsigned long long)t, pbuf,
       d->rank, f);
  return 0;
}

static int stop(void* h) {
  int known;
  uint64_t id = id_of(h, &known);
  if (known) emit("stop id=%llu", (unsigned long long)id);
  else emit("stop id=?");
  return 0;
}

static int record(void* h, int st, state_args_t* a) {
  int known;
  uint64_t id = id_of(h, &known);
  long long size = -1;
  if (a) {
    if (st == 18) size = a->proxyCtrl.appendedProxyOps;
#if PROF_VERSION <= 3
    else if (st >= 8 && st <= 12) size = (long long)a->proxyOp.transSize;
#else
    else if (st >= 8 && st <= 12) size = (long long)a->proxyStep.transSize;
    else if (st == 20) size = (long long)a->proxyStep.transSize;
#endif
  }
  if (known) emit("state id=%llu st=%d size=%lld", (unsigned long long)id, st, size);
  else emit("state id=? st=%d size=%lld", st, size);
  return 0;
}

static int finalize(void* ctx) {
  emit("finalize ok=%d", ctx == &ctx_token);
  return 0;
}

#define VT(v) ncclProfiler_v##v
#define VTN(v) VT(v)
typedef struct {
  const char* name;
  void* init;
  int (*startEvent)(void*, void**, descr_t*);
  int (*stopEvent)(void*);
  int (*recordEventState)(void*, int, state_args_t*);
  int (*finalize)(void*);
} prof_t;

__attribute__((visibility("default"))) const prof_t VTN(PROF_VERSION) = {
  "ProfRecV" XS(PROF_VERSION), (void*)init, start, stop, record, finalize,
};
