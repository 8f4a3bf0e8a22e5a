/*
 * libnccl-net-cnzdeaf.so: a CollNet plugin that never notices a dead peer, for the
 * conformance zoo (caught by collnet.fault.peer_killed only).
 *
 * It forwards every call to the in-tree plugin, libnccl_net_collnet_socket.so, found
 * in the same directory as this library (so it connects across processes and reduces
 * correctly), with one fault: when the real plugin reports an error for a request
 * (test fails, or an iallreduce post fails for a reason other than an invalid
 * argument, i.e. the group is broken), this plugin hides it and answers done = 0 for
 * that request forever. Refusals of unclaimed (type, op) pairs (ncclInvalidArgument)
 * pass through unchanged, so reduceSupport truthfulness still holds.
 *
 * Built with -DCN_STRICT_MR it is libnccl-net-cnstrictmr.so: no fault hidden, but every
 * iallreduce/iallgather/ireducescatter with a NULL mhandle is refused (ncclInvalidUsage),
 * as a NIC plugin that dereferences its registrations would fail
 * (core/tests/coll_collnet_agrs.rs).
 *
 * Built with -DCN_CONNECT_FAIL it is libnccl-net-cnconnfail.so instead: every CollNet
 * connect returns ncclSystemError (core/tests/coll_collnet_direct.rs: the communicator
 * goes on without CollNet, as NCCL's ncclCollNetSetup falls back).
 *
 * Exports ncclCollNetPlugin_v12 (layout: docs/reference/nccl-plugin-abi.md section 2,
 * 152 bytes, test at offset 112, iallreduce at 80, closeColl at 120) and the real
 * library's ncclNetPlugin_v6 (136 bytes), both copied at load time.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int ncclResult_t;
#define ncclSuccess 0
#define ncclInternalError 3
#define ncclInvalidArgument 4

typedef struct {
  const char* name;
  void* init;
  void* devices;
  void* getProperties;
  void* listen;
  void* connect;
  void* reduceSupport;
  void* regMr;
  void* regMrDmaBuf;
  void* deregMr;
  ncclResult_t (*iallreduce)(void*, void*, void*, size_t, int, int, void*, void*, void**);
  void* iallgather;
  void* ireducescatter;
  void* iflush;
  ncclResult_t (*test)(void*, int*, int*);
  ncclResult_t (*closeColl)(void*);
  void* closeListen;
  void* makeVDevice;
  void* finalize;
} cn12_t;
_Static_assert(sizeof(cn12_t) == 152 && offsetof(cn12_t, iallreduce) == 80 && offsetof(cn12_t, test) == 112 &&
                   offsetof(cn12_t, closeColl) == 120 && offsetof(cn12_t, finalize) == 144,
               "collnet v12");

/* The exported tables, filled by the constructor from the real library. */
__attribute__((visibility("default"))) cn12_t ncclCollNetPlugin_v12;
__attribute__((visibility("default"))) unsigned char ncclNetPlugin_v6[136];

static cn12_t real;

/* Requests whose failure was hidden (and the token for hidden post failures). */
#define DEAD_MAX 1024
static pthread_mutex_t dead_mu = PTHREAD_MUTEX_INITIALIZER;
static void* dead[DEAD_MAX];
static int ndead;
static char dead_post_token;

static void mark_dead(void* r) {
  pthread_mutex_lock(&dead_mu);
  if (ndead < DEAD_MAX) dead[ndead++] = r;
  pthread_mutex_unlock(&dead_mu);
}

static int is_dead(void* r) {
  if (r == &dead_post_token) return 1;
  int found = 0;
  pthread_mutex_lock(&dead_mu);
  for (int i = 0; i < ndead; i++) found |= dead[i] == r;
  pthread_mutex_unlock(&dead_mu);
  return found;
}

static ncclResult_t deaf_iallreduce(void* coll, void* s, void* r, size_t count, int ty, int op, void* smh, void* rmh,
                                    void** req) {
  ncclResult_t res = real.iallreduce(coll, s, r, count, ty, op, smh, rmh, req);
  if (res != ncclSuccess && res != ncclInvalidArgument) {
    /* The fault: a broken group is not reported; the request simply never completes. */
    *req = &dead_post_token;
    return ncclSuccess;
  }
  return res;
}

static ncclResult_t deaf_test(void* req, int* done, int* size) {
  if (is_dead(req)) {
    *done = 0;
    return ncclSuccess;
  }
  ncclResult_t res = real.test(req, done, size);
  if (res != ncclSuccess) {
    /* The fault: the peer's death is swallowed, done stays 0 forever. */
    mark_dead(req);
    *done = 0;
    return ncclSuccess;
  }
  return res;
}

static ncclResult_t deaf_close_coll(void* coll) {
  pthread_mutex_lock(&dead_mu);
  ndead = 0;
  pthread_mutex_unlock(&dead_mu);
  return real.closeColl(coll);
}

static ncclResult_t unloaded(void) { return ncclInternalError; }

#ifdef CN_STRICT_MR
#define ncclInvalidUsage 5
typedef struct {
  void* mhandle;
  void* address;
  size_t size;
} sge9_t;
typedef ncclResult_t (*iag_t)(void*, void*, int, sge9_t*, size_t, size_t, size_t, void*, void**);
typedef ncclResult_t (*irs_t)(void*, int, sge9_t*, void*, size_t, size_t, size_t, int, int, void*, void**);
/* libnccl-net-cnstrictmr.so: every collective must come with registrations (NCCL never
 * passes a NULL mhandle: its staging region is registered at connect). */
static ncclResult_t strict_iallreduce(void* coll, void* s, void* r, size_t count, int ty, int op, void* smh, void* rmh,
                                      void** req) {
  if (!smh || !rmh) {
    fprintf(stderr, "cnstrictmr: iallreduce with a NULL mhandle\n");
    return ncclInvalidUsage;
  }
  return real.iallreduce(coll, s, r, count, ty, op, smh, rmh, req);
}
static ncclResult_t strict_iallgather(void* coll, void* s, int n, sge9_t* parts, size_t bpr, size_t off, size_t w,
                                      void* smh, void** req) {
  int ok = smh != NULL && n > 0;
  for (int i = 0; i < n; i++) ok &= parts[i].mhandle != NULL;
  if (!ok) {
    fprintf(stderr, "cnstrictmr: iallgather with a NULL mhandle\n");
    return ncclInvalidUsage;
  }
  return ((iag_t)real.iallgather)(coll, s, n, parts, bpr, off, w, smh, req);
}
static ncclResult_t strict_ireducescatter(void* coll, int n, sge9_t* parts, void* r, size_t bpr, size_t off, size_t w,
                                          int ty, int op, void* rmh, void** req) {
  int ok = rmh != NULL && n > 0;
  for (int i = 0; i < n; i++) ok &= parts[i].mhandle != NULL;
  if (!ok) {
    fprintf(stderr, "cnstrictmr: ireducescatter with a NULL mhandle\n");
    return ncclInvalidUsage;
  }
  return ((irs_t)real.ireducescatter)(coll, n, parts, r, bpr, off, w, ty, op, rmh, req);
}
#endif

#ifdef CN_CONNECT_FAIL
#define ncclSystemError 2
/* libnccl-net-cnconnfail.so: every connect fails (the host must go on without CollNet). */
static ncclResult_t connfail_connect(void** handles, int nranks, int rank, void* listenComm, void** collComm) {
  (void)handles;
  (void)nranks;
  (void)rank;
  (void)listenComm;
  *collComm = NULL;
  return ncclSystemError;
}
#endif

__attribute__((constructor)) static void deaf_load(void) {
  Dl_info me;
  char path[4096];
  void* lib = NULL;
  if (dladdr((void*)deaf_load, &me) && me.dli_fname) {
    const char* slash = strrchr(me.dli_fname, '/');
    int dirlen = slash ? (int)(slash - me.dli_fname) : 1;
    snprintf(path, sizeof(path), "%.*s/libnccl_net_collnet_socket.so", dirlen, slash ? me.dli_fname : ".");
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
  const void* cn = lib ? dlsym(lib, "ncclCollNetPlugin_v12") : NULL;
  const void* net = lib ? dlsym(lib, "ncclNetPlugin_v6") : NULL;
  if (!cn || !net) {
    fprintf(stderr, "cnzdeaf: cannot load libnccl_net_collnet_socket.so beside this library: %s\n", dlerror());
    /* Every slot fails: the host reports the error instead of crashing. */
    void** slots = (void**)&ncclCollNetPlugin_v12;
    for (size_t i = 1; i < sizeof(cn12_t) / sizeof(void*); i++) slots[i] = (void*)unloaded;
    ncclCollNetPlugin_v12.name = "CNzDeaf";
    return;
  }
  memcpy(&real, cn, sizeof(real));
  memcpy(ncclNetPlugin_v6, net, sizeof(ncclNetPlugin_v6));
  ncclCollNetPlugin_v12 = real;
  ncclCollNetPlugin_v12.name = "CNzDeaf";
  ncclCollNetPlugin_v12.iallreduce = deaf_iallreduce;
  ncclCollNetPlugin_v12.test = deaf_test;
  ncclCollNetPlugin_v12.closeColl = deaf_close_coll;
#ifdef CN_STRICT_MR
  ncclCollNetPlugin_v12 = real;
  ncclCollNetPlugin_v12.name = "CNStrictMr";
  ncclCollNetPlugin_v12.iallreduce = strict_iallreduce;
  ncclCollNetPlugin_v12.iallgather = (void*)strict_iallgather;
  ncclCollNetPlugin_v12.ireducescatter = (void*)strict_ireducescatter;
#endif
#ifdef CN_CONNECT_FAIL
  ncclCollNetPlugin_v12.name = "CNConnFail";
  ncclCollNetPlugin_v12.connect = (void*)connfail_connect;
#endif
}
