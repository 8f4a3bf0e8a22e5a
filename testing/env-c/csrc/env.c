/* A test env plugin in plain C, for one ncclEnv API version chosen at compile
 * time (-DENV_VERSION=1 or 2). The layout follows the table of
 * docs/reference/nccl-plugin-abi.md §3.3 (NCCL 2.30.7 env_v1.h / env_v2.h),
 * written here by hand so the host is tested against C, not against its own
 * Rust definitions. The working plugin passes getenv through; -DZOO_* switches
 * build the broken variants (see src/lib.rs). */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef ENV_VERSION
#error "define ENV_VERSION"
#endif

typedef int ncclResult_t; /* ncclSuccess 0, ncclSystemError 2, ncclInternalError 3 */
typedef void (*ncclDebugLogger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

#if ENV_VERSION == 1
typedef struct {
  const char* name;
  ncclResult_t (*init)(uint8_t ncclMajor, uint8_t ncclMinor, uint8_t ncclPatch, const char* suffix);
  ncclResult_t (*finalize)(void);
  const char* (*getEnv)(const char* name);
} ncclEnv_v1_t;
_Static_assert(sizeof(ncclEnv_v1_t) == 32, "ncclEnv_v1_t layout");
#else
typedef struct {
  const char* name;
  ncclResult_t (*init)(uint8_t ncclMajor, uint8_t ncclMinor, uint8_t ncclPatch, const char* suffix,
                       ncclDebugLogger_t logFunction);
  ncclResult_t (*finalize)(void);
  const char* (*getEnv)(const char* name);
} ncclEnv_v2_t;
_Static_assert(sizeof(ncclEnv_v2_t) == 32, "ncclEnv_v2_t layout");
#endif

static pthread_t initThread;

static ncclResult_t initCommon(void) {
  initThread = pthread_self();
#ifdef ZOO_INITFAIL
  return 2;
#else
  return 0;
#endif
}

#if ENV_VERSION == 1
static ncclResult_t envInit(uint8_t major, uint8_t minor, uint8_t patch, const char* suffix) {
  (void)major; (void)minor; (void)patch; (void)suffix;
  return initCommon();
}
#else
static ncclResult_t envInit(uint8_t major, uint8_t minor, uint8_t patch, const char* suffix,
                            ncclDebugLogger_t logFunction) {
  (void)suffix;
  if (logFunction) logFunction(3, 0x80, __FILE__, __LINE__, "CEnv init by NCCL %d.%d.%d", major, minor, patch);
  return initCommon();
}
#endif

static ncclResult_t envFinalize(void) {
#ifdef ZOO_FINALIZEFAIL
  return 3;
#else
  return 0;
#endif
}

static const char* envGetEnv(const char* name) {
  const char* v = getenv(name);
#ifdef ZOO_THREAD_AFFINE
  /* Its table is only "loaded" on init's thread. */
  if (!pthread_equal(pthread_self(), initThread)) return NULL;
#endif
#ifdef ZOO_EMPTY_UNSET
  if (v == NULL) return "";
#endif
#ifdef ZOO_DANGLING
  /* One buffer per thread, overwritten by the next call: a caller keeping the
   * pointer (as NCCL does, like getenv's) later reads another variable. */
  static __thread char buf[4096];
  if (v == NULL) return NULL;
  snprintf(buf, sizeof buf, "%s", v);
  return buf;
#endif
  return v;
}

#if ENV_VERSION == 1
__attribute__((visibility("default"))) const ncclEnv_v1_t ncclEnvPlugin_v1 = {
  "CEnvV1",
#else
__attribute__((visibility("default"))) const ncclEnv_v2_t ncclEnvPlugin_v2 = {
#ifdef ZOO_NONAME
  NULL,
#else
  "CEnvV2",
#endif
#endif
  envInit,
  envFinalize,
  envGetEnv,
};
