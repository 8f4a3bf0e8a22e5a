/*
 * A recording CollNet test plugin in C for ferroccl's host tests.
 *
 * Structs are written by hand from docs/reference/nccl-plugin-abi.md (section 1.2
 * properties, section 1.3 ncclNet_v6_t, section 2 ncclNetSGE and ncclCollNet_vN_t),
 * not generated from ferroccl's Rust definitions; offsets are pinned with
 * _Static_assert. CN_VERSION (6..12) selects the exported ncclCollNetPlugin_vN.
 *
 * Variants: CN_NO_COLLNET (no CollNet symbol), CN_INIT_FAIL (CollNet init returns
 * ncclSystemError), CN_ZERO_DEVICES (CollNet devices() = 0), CN_NULL_TEST (the
 * CollNet test slot is NULL); broken on purpose for the conformance zoo: CN_BAD_REDUCE
 * (max/int32 computes min), CN_HANG_LARGE (an iallreduce of more than 100000 elements
 * never completes), CN_BAD_SGE (ireducescatter reads only the first SGE part),
 * CN_BAD_SGE_AG (iallgather writes only into the first SGE part),
 * CN_WRONG_SIZE (test reports twice the bytes).
 *
 * CollNet model: ranks are threads of one process. listen() writes a handle
 * {magic, group id, rank-local listener id}; connect() joins the group named by
 * handles[0] and waits (bounded, 10 s) for all nranks; an operation posted by every
 * rank is computed by the last poster, for all ranks, under the group mutex.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum {
  ncclSuccess = 0,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
} ncclResult_t;

typedef enum { NCCL_LOG_NONE = 0, NCCL_LOG_VERSION = 1, NCCL_LOG_WARN = 2, NCCL_LOG_INFO = 3 } ncclDebugLogLevel;
typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);
#define NCCL_INIT 0x1UL
#define NCCL_PTR_HOST 0x1

/* ---- properties (reference section 1.2) ----------------------------------------- */
typedef struct { int ndevs; int devs[4]; } vprops4_t;
typedef struct { int ndevs; int devs[8]; } vprops8_t;

typedef struct {
  char* name; char* pciPath; uint64_t guid; int ptrSupport;
#if CN_VERSION >= 8
  int regIsGlobal;
#endif
#if CN_VERSION >= 9
  int forceFlush;
#endif
  int speed; int port; float latency; int maxComms; int maxRecvs;
#if CN_VERSION >= 7
  int netDeviceType; int netDeviceVersion;
#endif
#if CN_VERSION >= 12
  vprops8_t vProps;
#elif CN_VERSION >= 9
  vprops4_t vProps;
#endif
#if CN_VERSION >= 9
  size_t maxP2pBytes; size_t maxCollBytes;
#endif
#if CN_VERSION >= 11
  int maxMultiRequestSize;
#endif
#if CN_VERSION >= 12
  int16_t railId; int16_t planeId;
#endif
} cn_props_t;

#if CN_VERSION == 6
_Static_assert(sizeof(cn_props_t) == 48, "props v6");
#elif CN_VERSION == 7
_Static_assert(sizeof(cn_props_t) == 56, "props v7");
#elif CN_VERSION == 8
_Static_assert(sizeof(cn_props_t) == 64, "props v8");
_Static_assert(offsetof(cn_props_t, speed) == 32, "props v8 speed");
#elif CN_VERSION <= 10
_Static_assert(sizeof(cn_props_t) == 104, "props v9");
_Static_assert(offsetof(cn_props_t, maxCollBytes) == 96, "props v9 maxCollBytes");
#elif CN_VERSION == 11
_Static_assert(sizeof(cn_props_t) == 112, "props v11");
#else
_Static_assert(sizeof(cn_props_t) == 128, "props v12");
_Static_assert(offsetof(cn_props_t, maxCollBytes) == 112, "props v12 maxCollBytes");
_Static_assert(offsetof(cn_props_t, railId) == 124, "props v12 railId");
#endif

/* ---- SGE (reference section 2) --------------------------------------------------- */
typedef struct { void* mhandle; void* address; uint32_t size; } sge_v8_t;
typedef struct { void* mhandle; void* address; size_t size; } sge_v9_t;
_Static_assert(sizeof(sge_v8_t) == 24 && offsetof(sge_v8_t, size) == 16, "sge v8");
_Static_assert(sizeof(sge_v9_t) == 24 && offsetof(sge_v9_t, size) == 16, "sge v9");
#if CN_VERSION == 8
typedef sge_v8_t cn_sge_t;
#else
typedef sge_v9_t cn_sge_t;
#endif

#if CN_VERSION >= 9
typedef size_t cn_count_t;
#else
typedef int cn_count_t;
#endif
#if CN_VERSION >= 8
typedef size_t cn_regsize_t;
#else
typedef int cn_regsize_t;
#endif

/* ---- recording ------------------------------------------------------------------- */
static pthread_mutex_t rec_mu = PTHREAD_MUTEX_INITIALIZER;
static char rec_log[8192];
enum {
  S_INIT, S_FINALIZE, S_DEVICES, S_LISTEN, S_CONNECT, S_NRANKS, S_RANK, S_REDSUPPORT, S_REG, S_REGSIZE, S_REGTYPE,
  S_DEREG, S_LIVE_MR, S_ALLREDUCE, S_COUNT, S_DTYPE, S_OP, S_ALLGATHER, S_REDSCAT, S_NPARTS, S_PART0, S_PART1,
  S_BPR, S_WOFF, S_WBYTES, S_FLUSH, S_FLUSHSIZE, S_TEST, S_CLOSECOLL, S_CLOSELISTEN, S_COMMID, S_LOGGER, S_NSTATS
};
static const char* stat_names[S_NSTATS] = {
  "init", "finalize", "devices", "listen", "connect", "nranks", "rank", "reduceSupport", "regMr", "regSize",
  "regType", "deregMr", "liveMr", "iallreduce", "count", "dtype", "op", "iallgather", "ireducescatter", "nparts",
  "part0", "part1", "bytesPerRank", "windowOffset", "windowBytes", "iflush", "flushSize", "test", "closeColl",
  "closeListen", "commId", "logger"
};
static long long stats[S_NSTATS];

static void rec(int key, long long v, int add, const char* ev) {
  pthread_mutex_lock(&rec_mu);
  if (add) stats[key] += v; else stats[key] = v;
  if (ev && strlen(rec_log) + strlen(ev) + 2 < sizeof(rec_log)) { strcat(rec_log, ev); strcat(rec_log, " "); }
  pthread_mutex_unlock(&rec_mu);
}

/* Test hooks (not part of the NCCL ABI). */
long long cn_stat(const char* key) {
  for (int i = 0; i < S_NSTATS; i++) if (strcmp(key, stat_names[i]) == 0) {
    pthread_mutex_lock(&rec_mu); long long v = stats[i]; pthread_mutex_unlock(&rec_mu); return v;
  }
  return -1;
}
const char* cn_log(void) { return rec_log; }

/* ---- the in-process "network" ---------------------------------------------------- */
#define MAGIC 0xC011AE7ULL
#define MAX_RANKS 8
#define MAX_OPS 64

typedef struct req { int done; int size; } req_t;

typedef struct {
  int kind; /* 1 allreduce, 2 allgather, 3 reducescatter */
  int posted;
  void* send[MAX_RANKS]; void* recv[MAX_RANKS];
  cn_sge_t parts[MAX_RANKS][4]; int nparts[MAX_RANKS];
  size_t count; int dtype; int op; size_t bpr, woff, wbytes;
  req_t* reqs[MAX_RANKS];
} op_t;

typedef struct group {
  uint64_t id; int nranks; int joined;
  pthread_mutex_t mu; pthread_cond_t cv;
  op_t ops[MAX_OPS];
  struct group* next;
} group_t;

typedef struct { uint64_t magic; group_t* g; int rank; uint64_t seq; int live_mr; } coll_t;
typedef struct { uint64_t magic; uint64_t group_id; int closed; } listen_t;
typedef struct { uint64_t magic; uint64_t comm_id; } ctx_t;
typedef struct { uint64_t magic; coll_t* c; size_t size; } mr_t;

static pthread_mutex_t groups_mu = PTHREAD_MUTEX_INITIALIZER;
static group_t* groups;
static uint64_t next_id = 1;
static ncclDebugLogger_t logger;

static size_t type_size(int t) {
  switch (t) { case 0: case 1: return 1; case 2: case 3: case 7: return 4; case 4: case 5: case 8: return 8; default: return 0; }
}
static int supported(int t, int op) { return type_size(t) != 0 && (op == 0 || op == 2 || op == 3); }

#define RED(T) { T* d = (T*)dst; const T* s = (const T*)src; for (size_t i = 0; i < n; i++) { \
  if (op == 0) d[i] = (T)(d[i] + s[i]); else if (op == 2) { if (s[i] > d[i]) d[i] = s[i]; } else { if (s[i] < d[i]) d[i] = s[i]; } } }
static void reduce_into(void* dst, const void* src, size_t n, int t, int op) {
#ifdef CN_BAD_REDUCE
  /* Broken on purpose: claims max/int32 but computes min. */
  if (t == 2 && op == 2) op = 3;
#endif
  switch (t) {
    case 0: RED(int8_t) break; case 1: RED(uint8_t) break; case 2: RED(int32_t) break; case 3: RED(uint32_t) break;
    case 4: RED(int64_t) break; case 5: RED(uint64_t) break; case 7: RED(float) break; case 8: RED(double) break;
    default: break;
  }
}

/* Copies [off, off+len) of a list of parts (as one contiguous range) into or out of buf. */
static void parts_copy(cn_sge_t* p, int np, char* buf, size_t len, int to_parts) {
  size_t done = 0;
  for (int i = 0; i < np && done < len; i++) {
    size_t n = p[i].size < len - done ? p[i].size : len - done;
    if (to_parts) memcpy(p[i].address, buf + done, n); else memcpy(buf + done, p[i].address, n);
    done += n;
  }
}

/* Called with g->mu held when every rank posted op o. */
static void complete(group_t* g, op_t* o) {
  int nr = g->nranks;
  if (o->kind == 1) {
    size_t bytes = o->count * type_size(o->dtype);
    char* acc = malloc(bytes ? bytes : 1);
    memcpy(acc, o->send[0], bytes);
    for (int r = 1; r < nr; r++) reduce_into(acc, o->send[r], o->count, o->dtype, o->op);
    for (int r = 0; r < nr; r++) { memcpy(o->recv[r], acc, bytes); o->reqs[r]->size = (int)bytes; }
    free(acc);
  } else if (o->kind == 2) {
    size_t total = o->bpr * nr;
    char* all = malloc(total ? total : 1);
    /* Rank r sends its bytes inside the window, from global offset
     * max(windowOffset, r * bytesPerRank) (NCCL 2.30.7 src/transport/coll_net.cc,
     * collNetRegIallgather: sendbuff + winOffset % sizePerRank when the window
     * starts in this rank's share, else the share's start). */
    memset(all, 0, total ? total : 1);
    for (int r = 0; r < nr; r++) {
      size_t lo = r * o->bpr, hi = lo + o->bpr, wlo = o->woff, whi = o->woff + o->wbytes;
      size_t a = lo > wlo ? lo : wlo, b = hi < whi ? hi : whi;
      if (b > a) memcpy(all + a, o->send[r], b - a);
    }
    for (int r = 0; r < nr; r++) {
#ifdef CN_BAD_SGE_AG
      /* Broken on purpose: scatters the window into the first SGE part only. */
      o->nparts[r] = 1;
#endif
      parts_copy(o->parts[r], o->nparts[r], all + o->woff, o->wbytes, 1);
      o->reqs[r]->size = (int)o->wbytes;
    }
    free(all);
  } else {
    char* acc = malloc(o->wbytes ? o->wbytes : 1);
    char* tmp = malloc(o->wbytes ? o->wbytes : 1);
    size_t ts = type_size(o->dtype);
#ifdef CN_BAD_SGE
    /* Broken on purpose: reads only the first SGE part of every rank. */
    memset(acc, 0, o->wbytes ? o->wbytes : 1); memset(tmp, 0, o->wbytes ? o->wbytes : 1);
    for (int r = 0; r < nr; r++) o->nparts[r] = 1;
#endif
    parts_copy(o->parts[0], o->nparts[0], acc, o->wbytes, 0);
    for (int r = 1; r < nr; r++) {
      parts_copy(o->parts[r], o->nparts[r], tmp, o->wbytes, 0);
      reduce_into(acc, tmp, o->wbytes / ts, o->dtype, o->op);
    }
    /* Rank r receives the part of the window inside its own share, from recvData. */
    for (int r = 0; r < nr; r++) {
      size_t lo = r * o->bpr, hi = lo + o->bpr, wlo = o->woff, whi = o->woff + o->wbytes;
      size_t a = lo > wlo ? lo : wlo, b = hi < whi ? hi : whi, n = b > a ? b - a : 0;
      if (n) memcpy(o->recv[r], acc + (a - wlo), n);
      o->reqs[r]->size = (int)n;
    }
    free(acc); free(tmp);
  }
  for (int r = 0; r < nr; r++) o->reqs[r]->done = 1;
  memset(o, 0, sizeof(*o));
}

static ncclResult_t post(coll_t* c, op_t* tmpl, cn_sge_t* parts, int np, void** request) {
  if (!c || c->magic != MAGIC) return ncclInvalidArgument;
  group_t* g = c->g;
  req_t* q = calloc(1, sizeof(req_t));
  pthread_mutex_lock(&g->mu);
  op_t* o = &g->ops[c->seq % MAX_OPS];
  if (o->posted == 0) { int k = o->posted; *o = *tmpl; o->posted = k; }
  o->send[c->rank] = tmpl->send[0]; o->recv[c->rank] = tmpl->recv[0];
  for (int i = 0; i < np && i < 4; i++) o->parts[c->rank][i] = parts[i];
  o->nparts[c->rank] = np;
  o->reqs[c->rank] = q;
  c->seq++;
  if (++o->posted == g->nranks) complete(g, o);
  pthread_mutex_unlock(&g->mu);
  *request = q;
  return ncclSuccess;
}

/* ---- CollNet slots ----------------------------------------------------------------- */
#if CN_VERSION >= 11
static ncclResult_t cn_init(void** ctx, uint64_t commId, ncclDebugLogger_t log) {
  rec(S_COMMID, (long long)commId, 0, NULL);
#else
static ncclResult_t cn_init(ncclDebugLogger_t log) {
#endif
  rec(S_INIT, 1, 1, "init");
  logger = log;
  rec(S_LOGGER, log != NULL, 0, NULL);
  if (log) log(NCCL_LOG_INFO, NCCL_INIT, __FILE__, __LINE__, "CN v%d init", CN_VERSION);
#ifdef CN_INIT_FAIL
  return ncclSystemError;
#endif
#if CN_VERSION >= 11
  ctx_t* x = calloc(1, sizeof(ctx_t)); x->magic = MAGIC; x->comm_id = commId; *ctx = x;
#endif
  return ncclSuccess;
}
#if CN_VERSION >= 11
static ncclResult_t cn_finalize(void* ctx) {
  ctx_t* x = ctx;
  if (!x || x->magic != MAGIC) return ncclInvalidArgument;
  x->magic = 0; free(x);
  rec(S_FINALIZE, 1, 1, "finalize");
  return ncclSuccess;
}
#endif

static ncclResult_t cn_devices(int* n) {
  rec(S_DEVICES, 1, 1, NULL);
#ifdef CN_ZERO_DEVICES
  *n = 0;
#else
  *n = 1;
#endif
  return ncclSuccess;
}

static ncclResult_t cn_get_properties(int dev, cn_props_t* p) {
  if (dev != 0) return ncclInvalidArgument;
  memset(p, 0, sizeof(*p));
  p->name = "cn0"; p->guid = 0x1000 + CN_VERSION; p->ptrSupport = NCCL_PTR_HOST;
  p->speed = 100 * CN_VERSION; p->port = CN_VERSION; p->latency = 1.5f; p->maxComms = 16; p->maxRecvs = 1;
#if CN_VERSION >= 7
  p->netDeviceType = CN_VERSION < 9 ? 1 : 0; /* v7/v8: NCCL reports CollNet devices as HOST anyway */
  p->netDeviceVersion = 7;
#endif
#if CN_VERSION >= 8
  p->regIsGlobal = 1;
#endif
#if CN_VERSION >= 9
  p->forceFlush = 1; p->vProps.ndevs = 1; p->vProps.devs[0] = dev;
  p->maxP2pBytes = (size_t)1 << 31; p->maxCollBytes = ((size_t)1 << 20) * CN_VERSION;
#endif
#if CN_VERSION >= 11
  p->maxMultiRequestSize = 1;
#endif
#if CN_VERSION >= 12
  p->railId = 3; p->planeId = 4;
#endif
  return ncclSuccess;
}

static ncclResult_t do_listen(int dev, void* handle, void** listenComm) {
  if (dev != 0) return ncclInvalidArgument;
  listen_t* l = calloc(1, sizeof(listen_t));
  l->magic = MAGIC;
  pthread_mutex_lock(&groups_mu); l->group_id = next_id++; pthread_mutex_unlock(&groups_mu);
  uint64_t h[2] = {MAGIC, l->group_id};
  memcpy(handle, h, sizeof(h));
  *listenComm = l;
  rec(S_LISTEN, 1, 1, "listen");
  return ncclSuccess;
}
#if CN_VERSION >= 11
static ncclResult_t cn_listen(void* ctx, int dev, void* handle, void** listenComm) {
  ctx_t* x = ctx;
  if (!x || x->magic != MAGIC) return ncclInvalidArgument;
  return do_listen(dev, handle, listenComm);
}
#else
static ncclResult_t cn_listen(int dev, void* handle, void** listenComm) { return do_listen(dev, handle, listenComm); }
#endif

static ncclResult_t cn_connect(void* handles[], int nranks, int rank, void* listenComm, void** collComm) {
  listen_t* l = listenComm;
  if (!l || l->magic != MAGIC || l->closed) return ncclInvalidArgument;
  if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  for (int r = 0; r < nranks; r++) { uint64_t h[2]; memcpy(h, handles[r], sizeof(h)); if (h[0] != MAGIC) return ncclInvalidArgument; }
  uint64_t h[2]; memcpy(h, handles[0], sizeof(h));
  uint64_t mine[2]; memcpy(mine, handles[rank], sizeof(mine));
  if (mine[1] != l->group_id) return ncclInvalidArgument; /* handles[rank] must be this rank's own */
  pthread_mutex_lock(&groups_mu);
  group_t* g = groups;
  while (g && g->id != h[1]) g = g->next;
  if (!g) {
    g = calloc(1, sizeof(group_t)); g->id = h[1]; g->nranks = nranks;
    pthread_mutex_init(&g->mu, NULL); pthread_cond_init(&g->cv, NULL);
    g->next = groups; groups = g;
  }
  pthread_mutex_unlock(&groups_mu);
  pthread_mutex_lock(&g->mu);
  g->joined++;
  pthread_cond_broadcast(&g->cv);
  struct timespec dl; clock_gettime(CLOCK_REALTIME, &dl); dl.tv_sec += 10;
  int ok = 1;
  while (g->joined < g->nranks) if (pthread_cond_timedwait(&g->cv, &g->mu, &dl) != 0) { ok = 0; break; }
  pthread_mutex_unlock(&g->mu);
  if (!ok) return ncclSystemError;
  coll_t* c = calloc(1, sizeof(coll_t)); c->magic = MAGIC; c->g = g; c->rank = rank;
  *collComm = c;
  rec(S_CONNECT, 1, 1, "connect"); rec(S_NRANKS, nranks, 0, NULL); rec(S_RANK, rank, 0, NULL);
  return ncclSuccess;
}

static ncclResult_t cn_reduce_support(int dataType, int redOp, int* supp) {
  rec(S_REDSUPPORT, 1, 1, NULL);
  *supp = supported(dataType, redOp);
  return ncclSuccess;
}

static ncclResult_t cn_reg_mr(void* collComm, void* data, cn_regsize_t size, int type, void** mhandle) {
  coll_t* c = collComm;
  if (!c || c->magic != MAGIC || !data) return ncclInvalidArgument;
  mr_t* m = calloc(1, sizeof(mr_t)); m->magic = MAGIC; m->c = c; m->size = (size_t)size;
  __atomic_add_fetch(&c->live_mr, 1, __ATOMIC_SEQ_CST);
  *mhandle = m;
  rec(S_REG, 1, 1, "regMr"); rec(S_REGSIZE, (long long)size, 0, NULL); rec(S_REGTYPE, type, 0, NULL);
  rec(S_LIVE_MR, 1, 1, NULL);
  return ncclSuccess;
}
static ncclResult_t cn_reg_mr_dmabuf(void* collComm, void* data, size_t size, int type, uint64_t off, int fd, void** mh) {
  (void)off; (void)fd;
  return cn_reg_mr(collComm, data, (cn_regsize_t)size, type, mh);
}
static ncclResult_t cn_dereg_mr(void* collComm, void* mhandle) {
  mr_t* m = mhandle;
  if (!m || m->magic != MAGIC || m->c != collComm) return ncclInvalidArgument;
  __atomic_sub_fetch(&m->c->live_mr, 1, __ATOMIC_SEQ_CST);
  m->magic = 0; free(m);
  rec(S_DEREG, 1, 1, "deregMr"); rec(S_LIVE_MR, -1, 1, NULL);
  return ncclSuccess;
}

static ncclResult_t cn_iallreduce(void* collComm, void* sendData, void* recvData, cn_count_t count, int dataType,
                                  int redOp, void* sendMhandle, void* recvMhandle, void** request) {
  (void)sendMhandle; (void)recvMhandle;
  rec(S_ALLREDUCE, 1, 1, "iallreduce"); rec(S_COUNT, (long long)count, 0, NULL);
  rec(S_DTYPE, dataType, 0, NULL); rec(S_OP, redOp, 0, NULL);
  if (!supported(dataType, redOp)) return ncclInvalidArgument;
#ifdef CN_HANG_LARGE
  /* Broken on purpose: a large allreduce gets a request that never completes. */
  if ((size_t)count > 100000) { *request = calloc(1, sizeof(req_t)); return ncclSuccess; }
#endif
  op_t t; memset(&t, 0, sizeof(t));
  t.kind = 1; t.send[0] = sendData; t.recv[0] = recvData; t.count = (size_t)count; t.dtype = dataType; t.op = redOp;
  return post(collComm, &t, NULL, 0, request);
}

#if CN_VERSION >= 8
static void rec_parts(int np, cn_sge_t* p, size_t bpr, size_t woff, size_t wb) {
  rec(S_NPARTS, np, 0, NULL);
  rec(S_PART0, np > 0 ? (long long)p[0].size : -1, 0, NULL);
  rec(S_PART1, np > 1 ? (long long)p[1].size : -1, 0, NULL);
  rec(S_BPR, (long long)bpr, 0, NULL); rec(S_WOFF, (long long)woff, 0, NULL); rec(S_WBYTES, (long long)wb, 0, NULL);
}
static ncclResult_t cn_iallgather(void* collComm, void* sendData, int nRecvParts, cn_sge_t* recvParts,
                                  size_t bytesPerRank, size_t windowOffset, size_t windowBytes, void* sendMhandle,
                                  void** request) {
  (void)sendMhandle;
  rec(S_ALLGATHER, 1, 1, "iallgather");
  rec_parts(nRecvParts, recvParts, bytesPerRank, windowOffset, windowBytes);
  if (nRecvParts < 1 || nRecvParts > 4) return ncclInvalidArgument;
  op_t t; memset(&t, 0, sizeof(t));
  t.kind = 2; t.send[0] = sendData; t.bpr = bytesPerRank; t.woff = windowOffset; t.wbytes = windowBytes;
  return post(collComm, &t, recvParts, nRecvParts, request);
}
static ncclResult_t cn_ireducescatter(void* collComm, int nSendParts, cn_sge_t* sendParts, void* recvData,
                                      size_t bytesPerRank, size_t windowOffset, size_t windowBytes, int dataType,
                                      int redOp, void* recvMhandle, void** request) {
  (void)recvMhandle;
  rec(S_REDSCAT, 1, 1, "ireducescatter");
  rec_parts(nSendParts, sendParts, bytesPerRank, windowOffset, windowBytes);
  rec(S_DTYPE, dataType, 0, NULL); rec(S_OP, redOp, 0, NULL);
  if (nSendParts < 1 || nSendParts > 4 || !supported(dataType, redOp)) return ncclInvalidArgument;
  op_t t; memset(&t, 0, sizeof(t));
  t.kind = 3; t.recv[0] = recvData; t.bpr = bytesPerRank; t.woff = windowOffset; t.wbytes = windowBytes;
  t.dtype = dataType; t.op = redOp;
  return post(collComm, &t, sendParts, nSendParts, request);
}
#endif

static ncclResult_t cn_iflush(void* collComm, void* data, int size, void* mhandle, void** request) {
  (void)data; (void)mhandle;
  coll_t* c = collComm;
  if (!c || c->magic != MAGIC) return ncclInvalidArgument;
  rec(S_FLUSH, 1, 1, "iflush"); rec(S_FLUSHSIZE, size, 0, NULL);
  req_t* q = calloc(1, sizeof(req_t)); q->done = 1; q->size = size;
  *request = q;
  return ncclSuccess;
}

__attribute__((unused)) static ncclResult_t cn_test(void* request, int* done, int* size) {
  req_t* q = request;
  rec(S_TEST, 1, 1, NULL);
  if (!q) return ncclInvalidArgument;
  /* The group mutex orders the writes of `complete`; an atomic load suffices here. */
  *done = __atomic_load_n(&q->done, __ATOMIC_SEQ_CST);
#ifdef CN_WRONG_SIZE
  /* Broken on purpose: reports twice the bytes. */
  if (*done) { if (size) *size = 2 * q->size; free(q); }
#else
  if (*done) { if (size) *size = q->size; free(q); }
#endif
  return ncclSuccess;
}

static ncclResult_t cn_close_coll(void* collComm) {
  coll_t* c = collComm;
  if (!c || c->magic != MAGIC) return ncclInvalidArgument;
  rec(S_CLOSECOLL, 1, 1, "closeColl");
  if (__atomic_load_n(&c->live_mr, __ATOMIC_SEQ_CST) != 0) return ncclInternalError; /* deregMr must come first */
  c->magic = 0; free(c);
  return ncclSuccess;
}
static ncclResult_t cn_close_listen(void* listenComm) {
  listen_t* l = listenComm;
  if (!l || l->magic != MAGIC) return ncclInvalidArgument;
  l->closed = 1; l->magic = 0; free(l);
  rec(S_CLOSELISTEN, 1, 1, "closeListen");
  return ncclSuccess;
}

/* ---- the exported CollNet table --------------------------------------------------- */
typedef struct {
  const char* name;
  void* init;
  ncclResult_t (*devices)(int*);
  ncclResult_t (*getProperties)(int, cn_props_t*);
  void* listen;
  ncclResult_t (*connect)(void**, int, int, void*, void**);
  ncclResult_t (*reduceSupport)(int, int, int*);
  ncclResult_t (*regMr)(void*, void*, cn_regsize_t, int, void**);
  ncclResult_t (*regMrDmaBuf)(void*, void*, size_t, int, uint64_t, int, void**);
  ncclResult_t (*deregMr)(void*, void*);
  ncclResult_t (*iallreduce)(void*, void*, void*, cn_count_t, int, int, void*, void*, void**);
#if CN_VERSION >= 8
  void* iallgather;
  void* ireducescatter;
#endif
  ncclResult_t (*iflush)(void*, void*, int, void*, void**);
  ncclResult_t (*test)(void*, int*, int*);
  ncclResult_t (*closeColl)(void*);
  ncclResult_t (*closeListen)(void*);
#if CN_VERSION >= 9
  void* makeVDevice;
#endif
#if CN_VERSION >= 11
  ncclResult_t (*finalize)(void*);
#endif
} cn_table_t;

#if CN_VERSION <= 7
_Static_assert(sizeof(cn_table_t) == 120 && offsetof(cn_table_t, iflush) == 88, "collnet v6/v7");
#elif CN_VERSION == 8
_Static_assert(sizeof(cn_table_t) == 136 && offsetof(cn_table_t, iflush) == 104, "collnet v8");
#elif CN_VERSION <= 10
_Static_assert(sizeof(cn_table_t) == 144 && offsetof(cn_table_t, makeVDevice) == 136, "collnet v9/v10");
#else
_Static_assert(sizeof(cn_table_t) == 152 && offsetof(cn_table_t, finalize) == 144, "collnet v11/v12");
#endif

#define STR2(x) #x
#define STR(x) STR2(x)
#define SYM2(v) ncclCollNetPlugin_v##v
#define SYM(v) SYM2(v)

#ifdef CN_NO_COLLNET
/* Built but not exported: the library has no CollNet symbol. */
__attribute__((used)) static const cn_table_t cn_hidden_table = {
#else
__attribute__((visibility("default"))) const cn_table_t SYM(CN_VERSION) = {
#endif
  .name = "CNv" STR(CN_VERSION),
  .init = (void*)cn_init,
  .devices = cn_devices,
  .getProperties = cn_get_properties,
  .listen = (void*)cn_listen,
  .connect = cn_connect,
  .reduceSupport = cn_reduce_support,
  .regMr = cn_reg_mr,
  .regMrDmaBuf = cn_reg_mr_dmabuf,
  .deregMr = cn_dereg_mr,
  .iallreduce = cn_iallreduce,
#if CN_VERSION >= 8
  .iallgather = (void*)cn_iallgather,
  .ireducescatter = (void*)cn_ireducescatter,
#endif
  .iflush = cn_iflush,
#ifdef CN_NULL_TEST
  .test = NULL,
#else
  .test = cn_test,
#endif
  .closeColl = cn_close_coll,
  .closeListen = cn_close_listen,
#if CN_VERSION >= 9
  .makeVDevice = NULL,
#endif
#if CN_VERSION >= 11
  .finalize = cn_finalize,
#endif
};

/* ---- a minimal ncclNet_v6 so the host loads the library (reference section 1.3) ---- */
typedef struct {
  char* name; char* pciPath; uint64_t guid; int ptrSupport; int speed; int port; float latency; int maxComms;
  int maxRecvs;
} net_props_v6_t;
_Static_assert(sizeof(net_props_v6_t) == 48, "net props v6");

static ncclResult_t net_init(ncclDebugLogger_t log) { (void)log; return ncclSuccess; }
static ncclResult_t net_devices(int* n) { *n = 1; return ncclSuccess; }
static ncclResult_t net_props(int dev, net_props_v6_t* p) {
  if (dev != 0) return ncclInvalidArgument;
  memset(p, 0, sizeof(*p)); p->name = "cnnet0"; p->ptrSupport = NCCL_PTR_HOST; p->speed = 1000; p->maxComms = 1;
  p->maxRecvs = 1;
  return ncclSuccess;
}
static ncclResult_t net_unsupported(void) { return ncclInternalError; }

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t);
  ncclResult_t (*devices)(int*);
  ncclResult_t (*getProperties)(int, net_props_v6_t*);
  void* listen; void* connect; void* accept; void* regMr; void* regMrDmaBuf; void* deregMr; void* isend;
  void* irecv; void* iflush; void* test; void* closeSend; void* closeRecv; void* closeListen;
} net_v6_t;
_Static_assert(sizeof(net_v6_t) == 136, "net v6");

#define U (void*)net_unsupported
__attribute__((visibility("default"))) const net_v6_t ncclNetPlugin_v6 = {
  .name = "CNNet", .init = net_init, .devices = net_devices, .getProperties = net_props,
  .listen = U, .connect = U, .accept = U, .regMr = U, .regMrDmaBuf = U, .deregMr = U, .isend = U, .irecv = U,
  .iflush = U, .test = U, .closeSend = U, .closeRecv = U, .closeListen = U,
};
