/* A test tuner plugin in plain C, for one ncclTuner API version chosen at
 * compile time (-DTUNER_VERSION=2..6). Layouts follow the tables of
 * docs/reference/nccl-plugin-abi.md §3.1 (NCCL 2.30.7 tuner_v2..v6.h), written
 * here by hand so the host is tested against C, not against its own Rust
 * definitions. Behaviour is driven by environment variables read in init (see
 * src/lib.rs); -DZOO_* switches build the faulty variants. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef TUNER_VERSION
#error "define TUNER_VERSION"
#endif

typedef int ncclResult_t; /* ncclSuccess 0, ncclSystemError 2, ncclInternalError 3 */
typedef int ncclFunc_t;
typedef void (*ncclDebugLogger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

typedef struct {
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
} ncclNvlDomainInfo_v5_t;

typedef struct {
  double baseLatencies[7][3];
  double hwLatencies[3][7][3];
  double llMaxBws[4][3];
  double perChMaxRingLL128Bws[4][3];
  double perChMaxTreeLL128Bws[4][3];
  double perChMaxTreeBws[4][3];
  double perChMaxNVLSTreeBws[4][3];
} ncclTunerConstants_v5_t;

_Static_assert(sizeof(ncclNvlDomainInfo_v5_t) == 12, "NvlDomainInfo layout");
_Static_assert(sizeof(ncclTunerConstants_v5_t) == 1152, "constants layout");

#define NUM_ALGO 7
#define NUM_PROTO 3
#define IGNORE (-1.0f)

struct ctx {
  size_t nRanks, nNodes;
  int calls;
  int forceAlgo, forceProto, forceChannels, overwrite;
  size_t chunk;
  char log[512];
  ncclDebugLogger_t logFn;
};

__attribute__((unused)) static void logLine(struct ctx* c, const char* line) {
  if (!c->log[0]) return;
  FILE* f = fopen(c->log, "a");
  if (!f) return;
  fprintf(f, "%s\n", line);
  fclose(f);
}

__attribute__((unused)) static struct ctx* newCtx(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFn) {
  struct ctx* c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->nRanks = nRanks;
  c->nNodes = nNodes;
  c->logFn = logFn;
  c->forceAlgo = -1;
  c->forceProto = -1;
  const char* l = getenv("CTUNER_LOG");
  if (l) snprintf(c->log, sizeof(c->log), "%s", l);
  const char* f = getenv("CTUNER_FORCE");
  if (f) {
    int a = -1, p = -1, n = 0;
    if (sscanf(f, "%d,%d,%d", &a, &p, &n) >= 2) {
      c->forceAlgo = a;
      c->forceProto = p;
      c->forceChannels = n;
    }
  }
  c->overwrite = getenv("CTUNER_OVERWRITE") != NULL;
  const char* ch = getenv("CTUNER_CHUNK");
  if (ch) c->chunk = (size_t)strtoull(ch, NULL, 10);
  if (logFn) logFn(3, 0x40, __FILE__, __LINE__, "CTuner v%d: init nRanks %zu nNodes %zu", TUNER_VERSION, nRanks, nNodes);
  return c;
}

#if TUNER_VERSION >= 5
static ncclResult_t initV5(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t logFn,
                           ncclNvlDomainInfo_v5_t* nvl, ncclTunerConstants_v5_t* constants) {
#ifdef ZOO_INITFAIL
  (void)ctx; (void)commId; (void)nRanks; (void)nNodes; (void)logFn; (void)nvl; (void)constants;
  return 2;
#else
  struct ctx* c = newCtx(nRanks, nNodes, logFn);
  if (!c) return 2;
  char line[512];
  snprintf(line, sizeof(line), "init v%d nRanks=%zu nNodes=%zu commId=%llu domains=%d min=%d max=%d ringSimpleBase=%.2f",
           TUNER_VERSION, nRanks, nNodes, (unsigned long long)commId, nvl ? nvl->nNvlDomains : -1,
           nvl ? nvl->minRanksPerNvlDomain : -1, nvl ? nvl->maxRanksPerNvlDomain : -1,
           constants ? constants->baseLatencies[1][2] : -1.0);
  logLine(c, line);
  const char* rb = getenv("CTUNER_RING_BASE");
  if (rb && constants) {
    double v = strtod(rb, NULL);
    for (int p = 0; p < NUM_PROTO; p++) constants->baseLatencies[1][p] = v;
  }
  *ctx = c;
  return 0;
#endif
}
#else
static ncclResult_t initV2(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFn, void** ctx) {
  struct ctx* c = newCtx(nRanks, nNodes, logFn);
  if (!c) return 2;
  char line[256];
  snprintf(line, sizeof(line), "init v%d nRanks=%zu nNodes=%zu", TUNER_VERSION, nRanks, nNodes);
  logLine(c, line);
  *ctx = c;
  return 0;
}
#endif

#if TUNER_VERSION == 2
static ncclResult_t collInfoV2(void* ctx, ncclFunc_t coll, size_t nBytes, int collNetSupport, int nvlsSupport,
                               int numPipeOps, int* algorithm, int* protocol, int* nChannels) {
  struct ctx* c = ctx;
  if (!c) return 3;
  c->calls++;
  char line[256];
  snprintf(line, sizeof(line), "coll v2 func=%d nBytes=%zu pipe=%d collnet=%d nvls=%d algo=%d proto=%d nch=%d", coll,
           nBytes, numPipeOps, collNetSupport, nvlsSupport, *algorithm, *protocol, *nChannels);
  logLine(c, line);
  if (c->forceAlgo >= 0) {
    *algorithm = c->forceAlgo;
    *protocol = c->forceProto;
    if (c->forceChannels > 0) *nChannels = c->forceChannels;
  }
  return 0;
}
#else
static ncclResult_t collInfoTable(void* ctx, ncclFunc_t coll, size_t nBytes, int numPipeOps, float** collCostTable,
                                  int numAlgo, int numProto, int regBuff, int* nChannels) {
  struct ctx* c = ctx;
  float* t = (float*)collCostTable;
#ifdef ZOO_CRASH
  (void)c; (void)t; (void)coll; (void)nBytes; (void)numPipeOps; (void)numAlgo; (void)numProto; (void)regBuff; (void)nChannels;
  *(volatile int*)(uintptr_t)0 = 1;
  return 0;
#elif defined(ZOO_OOB)
  (void)c; (void)coll; (void)nBytes; (void)numPipeOps; (void)regBuff; (void)nChannels;
  t[-1] = 0.0f;
  t[numAlgo * numProto] = 0.0f;
  return 0;
#elif defined(ZOO_ERROR)
  (void)c; (void)t; (void)coll; (void)nBytes; (void)numPipeOps; (void)numAlgo; (void)numProto; (void)regBuff; (void)nChannels;
  return 3;
#else
  if (!c) return 3;
  c->calls++;
  char line[512];
  int off = snprintf(line, sizeof(line), "coll v%d func=%d nBytes=%zu pipe=%d numAlgo=%d numProto=%d regBuff=%d nch=%d table=",
                     TUNER_VERSION, coll, nBytes, numPipeOps, numAlgo, numProto, regBuff, *nChannels);
  for (int i = 0; i < numAlgo * numProto && off < (int)sizeof(line) - 16; i++)
    off += snprintf(line + off, sizeof(line) - off, "%s%.1f", i ? "," : "", t[i]);
  logLine(c, line);
  if (c->forceAlgo >= 0 && c->forceAlgo < numAlgo && c->forceProto >= 0 && c->forceProto < numProto) {
    float* e = &t[c->forceAlgo * numProto + c->forceProto];
    if (*e != IGNORE || c->overwrite) *e = 0.0f;
    if (c->forceChannels > 0) *nChannels = c->forceChannels;
  }
  return 0;
#endif
}
#if TUNER_VERSION == 3
static ncclResult_t collInfoV3(void* ctx, ncclFunc_t coll, size_t nBytes, int numPipeOps, float** collCostTable,
                               int numAlgo, int numProto, int* nChannels) {
  return collInfoTable(ctx, coll, nBytes, numPipeOps, collCostTable, numAlgo, numProto, -1, nChannels);
}
#endif
#endif

#if TUNER_VERSION == 6
static ncclResult_t chunkSize(void* ctx, ncclFunc_t coll, size_t nBytes, int algo, int proto, int nChannels,
                              size_t* chunk) {
  struct ctx* c = ctx;
  if (!c) return 3;
  char line[256];
  snprintf(line, sizeof(line), "chunk v6 func=%d nBytes=%zu algo=%d proto=%d nch=%d chunk=%zu", coll, nBytes, algo, proto,
           nChannels, *chunk);
  logLine(c, line);
  if (c->chunk) *chunk = c->chunk;
  return 0;
}
#endif

static ncclResult_t finalize(void* ctx) {
  struct ctx* c = ctx;
  if (!c) return 0;
  char line[128];
  snprintf(line, sizeof(line), "finalize v%d calls=%d", TUNER_VERSION, c->calls);
  logLine(c, line);
  free(c);
  return 0;
}

#if TUNER_VERSION == 2
typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t, size_t, ncclDebugLogger_t, void**);
  ncclResult_t (*getCollInfo)(void*, ncclFunc_t, size_t, int, int, int, int*, int*, int*);
  ncclResult_t (*destroy)(void*);
} ncclTuner_v2_t;
_Static_assert(sizeof(ncclTuner_v2_t) == 32, "v2 layout");
const ncclTuner_v2_t ncclTunerPlugin_v2 = {"CTunerV2", initV2, collInfoV2, finalize};
#elif TUNER_VERSION == 3
typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t, size_t, ncclDebugLogger_t, void**);
  ncclResult_t (*getCollInfo)(void*, ncclFunc_t, size_t, int, float**, int, int, int*);
  ncclResult_t (*destroy)(void*);
} ncclTuner_v3_t;
_Static_assert(sizeof(ncclTuner_v3_t) == 32, "v3 layout");
const ncclTuner_v3_t ncclTunerPlugin_v3 = {"CTunerV3", initV2, collInfoV3, finalize};
#elif TUNER_VERSION == 4
typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t, size_t, ncclDebugLogger_t, void**);
  ncclResult_t (*getCollInfo)(void*, ncclFunc_t, size_t, int, float**, int, int, int, int*);
  ncclResult_t (*destroy)(void*);
} ncclTuner_v4_t;
_Static_assert(sizeof(ncclTuner_v4_t) == 32, "v4 layout");
const ncclTuner_v4_t ncclTunerPlugin_v4 = {"CTunerV4", initV2, collInfoTable, finalize};
#elif TUNER_VERSION == 5
typedef struct {
  const char* name;
  ncclResult_t (*init)(void**, uint64_t, size_t, size_t, ncclDebugLogger_t, ncclNvlDomainInfo_v5_t*,
                       ncclTunerConstants_v5_t*);
  ncclResult_t (*getCollInfo)(void*, ncclFunc_t, size_t, int, float**, int, int, int, int*);
  ncclResult_t (*finalize)(void*);
} ncclTuner_v5_t;
_Static_assert(sizeof(ncclTuner_v5_t) == 32, "v5 layout");
const ncclTuner_v5_t ncclTunerPlugin_v5 = {"CTunerV5", initV5, collInfoTable, finalize};
#else
typedef struct {
  const char* name;
  ncclResult_t (*init)(void**, uint64_t, size_t, size_t, ncclDebugLogger_t, ncclNvlDomainInfo_v5_t*,
                       ncclTunerConstants_v5_t*);
  ncclResult_t (*getCollInfo)(void*, ncclFunc_t, size_t, int, float**, int, int, int, int*);
  ncclResult_t (*finalize)(void*);
  ncclResult_t (*getChunkSize)(void*, ncclFunc_t, size_t, int, int, int, size_t*);
} ncclTuner_v6_t;
_Static_assert(sizeof(ncclTuner_v6_t) == 40, "v6 layout");
const ncclTuner_v6_t ncclTunerPlugin_v6 = {"CTunerV6", initV5, collInfoTable, finalize, chunkSize};
#endif
