/* A net plugin that needs libferroccl_missing.so, which build.rs deletes after
 * linking: dlopen must fail with a dlerror naming the missing dependency. */
#include <stddef.h>

int ferroccl_missing_fn(void);

/* Same shape as ncclNet_v6_t's first two slots; never reached. */
struct missing_net_v6 {
  const char* name;
  int (*init)(void* logger);
  void* rest[15];
};

static int missing_init(void* logger) {
  (void)logger;
  return ferroccl_missing_fn() == 42 ? 0 : 3;
}

struct missing_net_v6 ncclNetPlugin_v6 = {"MissingDep", missing_init, {NULL}};
