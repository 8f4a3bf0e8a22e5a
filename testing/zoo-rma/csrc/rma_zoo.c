/* RMA zoo: the socket plugin's ncclRmaPlugin_v14 (NCCL 2.30.7 rma_v14.h layout, 21
 * pointer slots) copied at load time, with one fault. See src/lib.rs. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int ncclResult_t; /* ncclSuccess = 0 */

enum {
  S_NAME = 0, S_INIT, S_DEVICES, S_GETPROPS, S_LISTEN, S_CONNECT, S_CREATECTX, S_REGMRSYM,
  S_REGMRSYMDMABUF, S_DEREGMRSYM, S_DESTROYCTX, S_CLOSECOLL, S_CLOSELISTEN, S_IPUT,
  S_IPUTSIGNAL, S_IGET, S_IFLUSH, S_TEST, S_PROGRESS, S_QUERYLASTERROR, S_FINALIZE, N_SLOTS
};
_Static_assert(N_SLOTS * sizeof(void*) == 168, "ncclRma_v14_t is 168 bytes");

typedef struct { void* slot[N_SLOTS]; } table_t;

__attribute__((visibility("default"))) table_t ncclRmaPlugin_v14;
static table_t inner;

typedef ncclResult_t (*devices_fn)(int*);
typedef ncclResult_t (*createctx_fn)(void*, void*, void**);
typedef ncclResult_t (*iput_fn)(void*, int, uint64_t, void*, size_t, uint64_t, void*, uint32_t, void**);
typedef ncclResult_t (*iputsig_fn)(void*, int, uint64_t, void*, size_t, uint64_t, void*, uint32_t, uint64_t,
                                   void*, uint64_t, uint32_t, bool, void**);
typedef ncclResult_t (*test_fn)(void*, void*, int*);
typedef ncclResult_t (*progress_fn)(void*);

/* ---- faults ---- */

#if defined(ZOO_NODEV)
static ncclResult_t zoo_devices(int* ndev) { *ndev = 0; return 0; }
#endif

#if defined(ZOO_ODD_GET)
/* A get from an odd remote offset loses its last byte. */
static ncclResult_t zoo_iget(void* ctx, int c, uint64_t roff, void* rmh, size_t size, uint64_t loff, void* lmh,
                             uint32_t rank, void** req) {
  if ((roff & 1) && size > 1) size -= 1;
  return ((iput_fn)inner.slot[S_IGET])(ctx, c, roff, rmh, size, loff, lmh, rank, req);
}
#endif

#if defined(ZOO_SIGNAL_EARLY)
/* rmaCtx -> collComm, to test the signal-only request. */
static pthread_mutex_t map_mu = PTHREAD_MUTEX_INITIALIZER;
static void* map_ctx[256];
static void* map_coll[256];

static ncclResult_t zoo_create_ctx(void* coll, void* cfg, void** rctx) {
  ncclResult_t r = ((createctx_fn)inner.slot[S_CREATECTX])(coll, cfg, rctx);
  if (r == 0) {
    pthread_mutex_lock(&map_mu);
    for (int i = 0; i < 256; i++) {
      if (map_ctx[i] == NULL || map_ctx[i] == *rctx) { map_ctx[i] = *rctx; map_coll[i] = coll; break; }
    }
    pthread_mutex_unlock(&map_mu);
  }
  return r;
}

static void* coll_of(void* rctx) {
  void* c = NULL;
  pthread_mutex_lock(&map_mu);
  for (int i = 0; i < 256; i++) if (map_ctx[i] == rctx) { c = map_coll[i]; break; }
  pthread_mutex_unlock(&map_mu);
  return c;
}

/* The signal first (an iputSignal of no bytes, waited for), the data 2 ms later. */
static ncclResult_t zoo_iput_signal(void* ctx, int c, uint64_t soff, void* smh, size_t size, uint64_t doff,
                                    void* dmh, uint32_t rank, uint64_t sigoff, void* sigmh, uint64_t val,
                                    uint32_t op, bool strong, void** req) {
  void* coll = coll_of(ctx);
  if (size == 0 || coll == NULL)
    return ((iputsig_fn)inner.slot[S_IPUTSIGNAL])(ctx, c, soff, smh, size, doff, dmh, rank, sigoff, sigmh, val, op,
                                                  strong, req);
  void* sreq = NULL;
  ncclResult_t r = ((iputsig_fn)inner.slot[S_IPUTSIGNAL])(ctx, c, soff, smh, 0, doff, dmh, rank, sigoff, sigmh, val,
                                                          op, strong, &sreq);
  if (r != 0) return r;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    int done = 0;
    r = ((test_fn)inner.slot[S_TEST])(coll, sreq, &done);
    if (r != 0) return r;
    if (done) break;
    if (inner.slot[S_PROGRESS]) ((progress_fn)inner.slot[S_PROGRESS])(ctx);
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (t.tv_sec - t0.tv_sec > 2) return 6; /* ncclRemoteError: the signal never completed */
    usleep(10);
  }
  usleep(2000);
  return ((iput_fn)inner.slot[S_IPUT])(ctx, c, soff, smh, size, doff, dmh, rank, req);
}
#endif

#if defined(ZOO_STUCK_TEST)
/* iput requests tracked: 1 = counted pending, 2 = stuck pending, 3 = stuck, done inside.
 * An iput posted while its context has 32 or more pending is stuck. */
#define TRACK 8192
static pthread_mutex_t tr_mu = PTHREAD_MUTEX_INITIALIZER;
static void* tr_req[TRACK];
static int tr_state[TRACK];
static void* tr_ctx[TRACK];
/* Pending counted iputs per RMA context (one per rank). */
static void* pend_ctx[256];
static int pend_n[256];

static int* pending_of(void* ctx) {
  for (int i = 0; i < 256; i++) {
    if (pend_ctx[i] == ctx) return &pend_n[i];
    if (pend_ctx[i] == NULL) { pend_ctx[i] = ctx; pend_n[i] = 0; return &pend_n[i]; }
  }
  return &pend_n[255];
}

static int find(void* r) {
  for (int i = 0; i < TRACK; i++) if (tr_state[i] && tr_req[i] == r) return i;
  return -1;
}

static ncclResult_t zoo_iput(void* ctx, int c, uint64_t soff, void* smh, size_t size, uint64_t doff, void* dmh,
                             uint32_t rank, void** req) {
  ncclResult_t r = ((iput_fn)inner.slot[S_IPUT])(ctx, c, soff, smh, size, doff, dmh, rank, req);
  if (r != 0 || *req == NULL) return r;
  pthread_mutex_lock(&tr_mu);
  int i = find(*req);
  if (i < 0) for (i = 0; i < TRACK && tr_state[i]; i++) {}
  if (i < TRACK) {
    int* pending = pending_of(ctx);
    tr_req[i] = *req;
    tr_ctx[i] = ctx;
    tr_state[i] = *pending >= 32 ? 2 : 1;
    (*pending)++;
  }
  pthread_mutex_unlock(&tr_mu);
  return r;
}

static ncclResult_t zoo_test(void* coll, void* req, int* done) {
  pthread_mutex_lock(&tr_mu);
  int i = find(req);
  int st = i < 0 ? 0 : tr_state[i];
  pthread_mutex_unlock(&tr_mu);
  if (st == 3) { *done = 0; return 0; }
  ncclResult_t r = ((test_fn)inner.slot[S_TEST])(coll, req, done);
  if (r != 0 || !*done || st == 0) return r;
  pthread_mutex_lock(&tr_mu);
  (*pending_of(tr_ctx[i]))--;
  if (st == 2) { tr_state[i] = 3; *done = 0; } else { tr_state[i] = 0; }
  pthread_mutex_unlock(&tr_mu);
  return r;
}
#endif

/* ---- loading ---- */

__attribute__((constructor)) static void zoo_load(void) {
  char path[4096];
  const char* env = getenv("FERROCCL_ZOO_RMA_INNER");
  if (env != NULL && env[0] != '\0') {
    snprintf(path, sizeof path, "%s", env);
  } else {
    Dl_info info;
    if (dladdr((void*)&zoo_load, &info) == 0 || info.dli_fname == NULL) return;
    snprintf(path, sizeof path, "%s", info.dli_fname);
    char* slash = strrchr(path, '/');
    if (slash == NULL) return;
    snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "libnccl_net_socket.so");
  }
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) { fprintf(stderr, "rma zoo: %s\n", dlerror()); return; }
  table_t* t = (table_t*)dlsym(h, "ncclRmaPlugin_v14");
  if (t == NULL) { fprintf(stderr, "rma zoo: no ncclRmaPlugin_v14 in %s\n", path); return; }
  inner = *t;
  ncclRmaPlugin_v14 = *t;
  ncclRmaPlugin_v14.slot[S_NAME] = (void*)ZOO_NAME;
#if defined(ZOO_NODEV)
  ncclRmaPlugin_v14.slot[S_DEVICES] = (void*)zoo_devices;
#elif defined(ZOO_ODD_GET)
  ncclRmaPlugin_v14.slot[S_IGET] = (void*)zoo_iget;
#elif defined(ZOO_SIGNAL_EARLY)
  ncclRmaPlugin_v14.slot[S_CREATECTX] = (void*)zoo_create_ctx;
  ncclRmaPlugin_v14.slot[S_IPUTSIGNAL] = (void*)zoo_iput_signal;
#elif defined(ZOO_STUCK_TEST)
  ncclRmaPlugin_v14.slot[S_IPUT] = (void*)zoo_iput;
  ncclRmaPlugin_v14.slot[S_TEST] = (void*)zoo_test;
#endif
}
