/* Zoo profiler plugins for ferroccl's conformance suite (see src/lib.rs):
 * ncclProfiler_v<PROF_VERSION> written from the layout tables of
 * docs/reference/nccl-plugin-abi.md §3.2. Only the descriptor head is read:
 * `type` (uint8_t up to v4, uint64_t from v5) at offset 0 and `parentObj` at
 * offset 8 in every version. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef PROF_VERSION
#error "PROF_VERSION must be 1..6"
#endif

#define S(x) #x
#define XS(x) S(x)

enum { ok = 0, system_error = 2, internal_error = 3, invalid_usage = 5 };

#define CTX_MAGIC 0x5a4f4f43u  /* "ZOOC" */
#define EV_LIVE 0x5a4f4f45u    /* "ZOOE" */
#define EV_DONE 0x5a4f4f44u    /* "ZOOD" */

typedef struct { _Atomic uint32_t magic; } ctx_t;
typedef struct { _Atomic uint32_t magic; uint64_t type; } ev_t;

/* Events started and not yet stopped (ZOO_LEAK's finalize refuses when > 0). */
static _Atomic long live_events;

typedef struct {
#if PROF_VERSION <= 4
  uint8_t type;
#else
  uint64_t type;
#endif
  void* parentObj;
  int rank;
} descr_head_t;
_Static_assert(offsetof(descr_head_t, parentObj) == 8, "parentObj");
_Static_assert(offsetof(descr_head_t, rank) == 16, "rank");

typedef void (*logger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

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

static int common_init(void** ctx, int* mask) {
#ifdef ZOO_INITFAIL
  (void)ctx; (void)mask; (void)known_mask;
  return system_error;
#else
  ctx_t* c = calloc(1, sizeof *c);
  if (!c) return system_error;
  atomic_store(&c->magic, CTX_MAGIC);
  *ctx = c;
  *mask = known_mask();
  return ok;
#endif
}

#if PROF_VERSION <= 3
static int init(void** ctx, int* mask) { return common_init(ctx, mask); }
#elif PROF_VERSION == 4
static int init(void** ctx, int* mask, const char* name, uint64_t hash, int nnodes, int nranks, int rank, logger_t log) {
  (void)name; (void)hash; (void)nnodes; (void)nranks; (void)rank; (void)log;
  return common_init(ctx, mask);
}
#else
static int init(void** ctx, uint64_t id, int* mask, const char* name, int nnodes, int nranks, int rank, logger_t log) {
  (void)id; (void)name; (void)nnodes; (void)nranks; (void)rank; (void)log;
  return common_init(ctx, mask);
}
#endif

/* Records are never freed: a stopped parent still resolves (NCCL stops CollApi
 * before its Coll starts), and a stray late call reads DONE instead of freed memory. */
static int start(void* ctx, void** h, descr_head_t* d) {
  ctx_t* c = ctx;
  if (!c || atomic_load(&c->magic) != CTX_MAGIC) return invalid_usage;
  uint64_t type = d->type;
#ifdef ZOO_CRASH
  if (type == 32) { /* ProxyCtrl: "every event has a parent" */
    volatile int* parent = (volatile int*)d->parentObj;
    *parent += 1;
  }
#endif
  if (d->parentObj) {
    uint32_t m = atomic_load(&((ev_t*)d->parentObj)->magic);
    if (m != EV_LIVE && m != EV_DONE) return invalid_usage;
  }
  ev_t* e = calloc(1, sizeof *e);
  if (!e) return system_error;
  e->type = type;
  atomic_store(&e->magic, EV_LIVE);
  atomic_fetch_add(&live_events, 1);
  *h = e;
  return ok;
}

static int stop(void* h) {
#ifdef ZOO_NULL
  ev_t* e0 = h;
  if (atomic_load(&((volatile ev_t*)e0)->magic) == 0) return internal_error; /* crashes on NULL */
#endif
  if (!h) return ok;
  ev_t* e = h;
#ifdef ZOO_BLOCK
  if (e->type == 128) { /* NetPlugin: waits for a completion that never comes */
    for (;;) pause();
  }
#endif
  uint32_t want = EV_LIVE;
  if (!atomic_compare_exchange_strong(&e->magic, &want, EV_DONE)) return invalid_usage;
  atomic_fetch_sub(&live_events, 1);
  return ok;
}

static int record(void* h, int state, void* args) {
  (void)state; (void)args;
  ev_t* e = h;
  if (!e || atomic_load(&e->magic) != EV_LIVE) return invalid_usage;
  return ok;
}

static int finalize(void* ctx) {
  ctx_t* c = ctx;
  uint32_t want = CTX_MAGIC;
  if (!c || !atomic_compare_exchange_strong(&c->magic, &want, 0)) return invalid_usage;
#ifdef ZOO_LEAK
  if (atomic_load(&live_events) > 0) return internal_error; /* "every event must be stopped first" */
#endif
  return ok;
}

typedef struct {
  const char* name;
  void* init;
  int (*startEvent)(void*, void**, descr_head_t*);
  int (*stopEvent)(void*);
  int (*recordEventState)(void*, int, void*);
  int (*finalize)(void*);
} prof_t;
_Static_assert(sizeof(prof_t) == 48, "vtable size");

#ifdef ZOO_BOGUS
#define SYM ncclProfiler_v7
#else
#define VT(v) ncclProfiler_v##v
#define VTN(v) VT(v)
#define SYM VTN(PROF_VERSION)
#endif

__attribute__((visibility("default"))) const prof_t SYM = {
  "ZooV" XS(PROF_VERSION), (void*)init, start, stop, record, finalize,
};
