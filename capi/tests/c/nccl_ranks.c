/* A plain NCCL program (nothing ferroccl-specific but the NULL stream on host
 * memory): `nccl_ranks MODE NRANKS` runs NRANKS ranks as processes. Rank 0
 * makes the unique id and re-executes this binary for the other ranks (the id
 * in hex in NCCLT_ID); every process is bounded by alarm(). Modes:
 *   colls        every collective, groups, PreMulSum, split, registration,
 *                ncclMemAlloc, results checked; then use after destroy
 *   nonblocking  config.blocking = 0: init, AllReduce and finalize return
 *                ncclInProgress and are polled with ncclCommGetAsyncError
 *   abort        an AllReduce only rank 0 issues, then ncclCommAbort on both
 *   errors       NCCL's codes for bad rank, dtype, op, root, count, config,
 *                group misuse, unimplemented calls; mismatched counts last
 *   onethread    NRANKS ranks in this one process and thread: ncclCommInitAll,
 *                inits inside a group, collectives over all ranks in a group,
 *                the pnccl names
 *   rma          one-sided: windows, ncclPutSignal then ncclWaitSignal to the
 *                next rank (data checked), ncclSignal, a group of a put, a
 *                wait and an AllReduce, argument errors, deregistration (needs NCCL_SOCKET_RMA_ENABLE=1)
 *   rmanone      no RMA plugin (NCCL_SOCKET_RMA_ENABLE=0): NCCL 2.30.7's codes, window
 *                registration ncclInvalidUsage (ncclRmaProxyConnectOnce), then ncclSignal
 *                and ncclWaitSignal ncclInvalidArgument (rmaTaskAppend, !hostRmaSupport)
 * Prints "libnccl: <file>" (the library the loader chose) and "ok MODE rank R".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"

static int rank = 0, nranks = 0;

#define CHECK(cmd)                                                                              \
  do {                                                                                          \
    ncclResult_t r_ = (cmd);                                                                    \
    if (r_ != ncclSuccess) {                                                                    \
      fprintf(stderr, "rank %d: %s:%d: %s -> %d (%s): %s\n", rank, __FILE__, __LINE__, #cmd, r_, \
              ncclGetErrorString(r_), ncclGetLastError(NULL));                                  \
      exit(2);                                                                                  \
    }                                                                                           \
  } while (0)

#define EXPECT(cond, ...)                                                         \
  do {                                                                            \
    if (!(cond)) {                                                                \
      fprintf(stderr, "rank %d: FAILED %s:%d: %s: ", rank, __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                               \
      fputc('\n', stderr);                                                        \
      exit(3);                                                                    \
    }                                                                             \
  } while (0)

/* Expects `cmd` to return `want` and the last error to contain `text`. */
#define EXPECT_CODE(cmd, want, text)                                                          \
  do {                                                                                        \
    ncclResult_t r_ = (cmd);                                                                  \
    const char* e_ = ncclGetLastError(NULL);                                                  \
    EXPECT(r_ == (want), "%s returned %d (%s), expected %d; last error: %s", #cmd, r_,       \
           ncclGetErrorString(r_), (int)(want), e_);                                          \
    EXPECT(strstr(e_, (text)) != NULL, "%s: last error '%s' lacks '%s'", #cmd, e_, (text));   \
  } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Polls ncclCommGetAsyncError until the communicator leaves ncclInProgress
 * (bounded: 60 s); returns its state. */
static ncclResult_t wait_comm(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  double t0 = now();
  while (state == ncclInProgress) {
    CHECK(ncclCommGetAsyncError(comm, &state));
    EXPECT(now() - t0 < 60, "communicator still in progress after 60 s");
    if (state == ncclInProgress) usleep(1000);
  }
  return state;
}

static void fill(int32_t* b, size_t n, int32_t base) {
  for (size_t i = 0; i < n; i++) b[i] = base + (int32_t)i;
}

static void expect_ints(const int32_t* got, size_t n, const char* what, int32_t (*want)(size_t)) {
  for (size_t i = 0; i < n; i++)
    EXPECT(got[i] == want(i), "%s: element %zu is %d, expected %d", what, i, got[i], want(i));
}

/* Expected values (closures over the globals). */
#define COUNT 1031
static int32_t ar_sum(size_t i) { return 1000 * nranks * (nranks - 1) / 2 + nranks * (int32_t)i; }
static int32_t ag_val(size_t j) { return (int32_t)(j / COUNT) * 100 + (int32_t)(j % COUNT); }
static int32_t rs_val(size_t i) {
  return nranks * (nranks - 1) / 2 + nranks * (rank * COUNT + (int32_t)i);
}
static int32_t bc_val(size_t i) { return 7 * (int32_t)i + 1; }
static int32_t a2a_val(size_t j) { return (int32_t)(j / COUNT) * 1000 + rank * 10 + (int32_t)(j % COUNT) % 10; }
static int32_t ring_val(size_t i) { return ((rank + nranks - 1) % nranks) * 100 + (int32_t)i; }
static int32_t sc_val(size_t i) { return rank * 100 + (int32_t)i + 5; }

static void mode_colls(ncclComm_t comm) {
  int n = 0, r = -1, dev = 7, version = 0;
  CHECK(ncclCommCount(comm, &n));
  CHECK(ncclCommUserRank(comm, &r));
  CHECK(ncclCommCuDevice(comm, &dev));
  CHECK(ncclGetVersion(&version));
  EXPECT(n == nranks && r == rank, "count %d rank %d", n, r);
  EXPECT(version == NCCL_VERSION_CODE && version == NCCL_VERSION(2, 30, 7), "version %d", version);
  EXPECT(dev >= -1, "cuda device %d", dev);

  size_t big = (size_t)COUNT * nranks;
  int32_t* send = calloc(big, sizeof(int32_t));
  int32_t* recv = calloc(big, sizeof(int32_t));

  /* AllReduce, out of place and in place. */
  fill(send, COUNT, rank * 1000);
  CHECK(ncclAllReduce(send, recv, COUNT, ncclInt32, ncclSum, comm, NULL));
  expect_ints(recv, COUNT, "AllReduce", ar_sum);
  fill(recv, COUNT, rank * 1000);
  CHECK(ncclAllReduce(recv, recv, COUNT, ncclInt, ncclSum, comm, NULL));
  expect_ints(recv, COUNT, "AllReduce in place", ar_sum);

  /* AllReduce of floats with ncclAvg and ncclMax. */
  float fs[4] = {(float)rank, 2.0f * rank, -1.0f, 0.5f}, fr[4];
  CHECK(ncclAllReduce(fs, fr, 4, ncclFloat, ncclAvg, comm, NULL));
  EXPECT(fabsf(fr[0] - (nranks - 1) / 2.0f) < 1e-5f && fabsf(fr[2] + 1.0f) < 1e-6f, "Avg %f %f", fr[0], fr[2]);
  CHECK(ncclAllReduce(fs, fr, 4, ncclFloat32, ncclMax, comm, NULL));
  EXPECT(fr[1] == 2.0f * (nranks - 1), "Max %f", fr[1]);

  /* AllGather. */
  fill(send, COUNT, rank * 100);
  CHECK(ncclAllGather(send, recv, COUNT, ncclInt32, comm, NULL));
  expect_ints(recv, big, "AllGather", ag_val);

  /* ReduceScatter. */
  for (size_t j = 0; j < big; j++) send[j] = rank + (int32_t)j;
  CHECK(ncclReduceScatter(send, recv, COUNT, ncclInt32, ncclSum, comm, NULL));
  expect_ints(recv, COUNT, "ReduceScatter", rs_val);

  /* Broadcast from rank 1, and the in-place ncclBcast from the last rank. */
  int root = 1 % nranks;
  for (size_t i = 0; i < COUNT && rank == root; i++) send[i] = 7 * (int32_t)i + 1;
  memset(recv, 0, COUNT * sizeof(int32_t));
  CHECK(ncclBroadcast(send, recv, COUNT, ncclInt32, root, comm, NULL));
  expect_ints(recv, COUNT, "Broadcast", bc_val);
  memset(recv, 0, COUNT * sizeof(int32_t));
  if (rank == nranks - 1)
    for (size_t i = 0; i < COUNT; i++) recv[i] = 7 * (int32_t)i + 1;
  CHECK(ncclBcast(recv, COUNT, ncclInt32, nranks - 1, comm, NULL));
  expect_ints(recv, COUNT, "Bcast", bc_val);

  /* Reduce (int64 sum) to the last rank. */
  int64_t l = (int64_t)rank + (1LL << 40), lr = 0;
  CHECK(ncclReduce(&l, &lr, 1, ncclInt64, ncclSum, nranks - 1, comm, NULL));
  if (rank == nranks - 1)
    EXPECT(lr == (int64_t)nranks * (1LL << 40) + nranks * (nranks - 1) / 2, "Reduce %lld", (long long)lr);

  /* Send/Recv around the ring in a group. */
  fill(send, COUNT, rank * 100);
  CHECK(ncclGroupStart());
  CHECK(ncclSend(send, COUNT, ncclInt32, (rank + 1) % nranks, comm, NULL));
  CHECK(ncclRecv(recv, COUNT, ncclInt32, (rank + nranks - 1) % nranks, comm, NULL));
  CHECK(ncclGroupEnd());
  expect_ints(recv, COUNT, "Send/Recv ring", ring_val);

  /* AlltoAll: block j goes to rank j. */
  for (size_t j = 0; j < big; j++) send[j] = rank * 1000 + (int32_t)(j / COUNT) * 10 + (int32_t)(j % COUNT) % 10;
  CHECK(ncclAlltoAll(send, recv, COUNT, ncclInt32, comm, NULL));
  expect_ints(recv, big, "AlltoAll", a2a_val);

  /* Gather to rank 0 (recv on the root only), Scatter from the last rank. */
  fill(send, COUNT, rank * 100);
  memset(recv, 0, big * sizeof(int32_t));
  CHECK(ncclGather(send, rank == 0 ? recv : NULL, COUNT, ncclInt32, 0, comm, NULL));
  if (rank == 0) expect_ints(recv, big, "Gather", ag_val);
  int sroot = nranks - 1;
  for (size_t j = 0; j < big && rank == sroot; j++)
    send[j] = (int32_t)(j / COUNT) * 100 + (int32_t)(j % COUNT) + 5;
  CHECK(ncclScatter(rank == sroot ? send : NULL, recv, COUNT, ncclInt32, sroot, comm, NULL));
  expect_ints(recv, COUNT, "Scatter", sc_val);

  /* Two AllReduces in one group (nested groups too). */
  int32_t a = rank, b = 10 * rank, ra = 0, rb = 0;
  CHECK(ncclGroupStart());
  CHECK(ncclAllReduce(&a, &ra, 1, ncclInt32, ncclSum, comm, NULL));
  CHECK(ncclGroupStart());
  CHECK(ncclAllReduce(&b, &rb, 1, ncclInt32, ncclMax, comm, NULL));
  CHECK(ncclGroupEnd());
  CHECK(ncclGroupEnd());
  EXPECT(ra == nranks * (nranks - 1) / 2 && rb == 10 * (nranks - 1), "group: %d %d", ra, rb);

  /* PreMulSum: every input times 0.5, summed. */
  ncclRedOp_t half;
  float scalar = 0.5f, x = (float)(rank + 1), y = 0;
  CHECK(ncclRedOpCreatePreMulSum(&half, &scalar, ncclFloat32, ncclScalarHostImmediate, comm));
  EXPECT(half >= ncclNumOps, "user op id %d", (int)half);
  CHECK(ncclAllReduce(&x, &y, 1, ncclFloat32, half, comm, NULL));
  EXPECT(fabsf(y - 0.5f * nranks * (nranks + 1) / 2) < 1e-4f, "PreMulSum %f", y);
  CHECK(ncclRedOpDestroy(half, comm));
  EXPECT_CODE(ncclAllReduce(&x, &y, 1, ncclFloat32, half, comm, NULL), ncclInvalidArgument,
              "unknown to this communicator");

  /* fp8 data moves as bytes. */
  uint8_t f8 = (uint8_t)(0x30 + rank), f8all[64];
  CHECK(ncclAllGather(&f8, f8all, 1, ncclFloat8e4m3, comm, NULL));
  for (int i = 0; i < nranks; i++) EXPECT(f8all[i] == 0x30 + i, "fp8 AllGather %d: %x", i, f8all[i]);

  /* Split: parity colors, keys reversing the order. */
  ncclComm_t child = NULL;
  CHECK(ncclCommSplit(comm, rank % 2, -rank, &child, NULL));
  EXPECT(child != NULL, "split gave NULL");
  int cn = 0, cr = -1, members = 0, expect_rank = 0;
  for (int p = nranks - 1; p >= 0; p--)
    if (p % 2 == rank % 2) {
      if (p > rank) expect_rank++;
      members++;
    }
  CHECK(ncclCommCount(child, &cn));
  CHECK(ncclCommUserRank(child, &cr));
  EXPECT(cn == members && cr == expect_rank, "child %d/%d, expected %d/%d", cr, cn, expect_rank, members);
  int32_t me = rank, sum = 0, want = 0;
  for (int p = rank % 2; p < nranks; p += 2) want += p;
  CHECK(ncclAllReduce(&me, &sum, 1, ncclInt32, ncclSum, child, NULL));
  EXPECT(sum == want, "child AllReduce %d, expected %d", sum, want);
  CHECK(ncclCommDestroy(child));

  /* Registration and ncclMemAlloc'd buffers. */
  void* handle = NULL;
  CHECK(ncclCommRegister(comm, send, big * sizeof(int32_t), &handle));
  CHECK(ncclCommDeregister(comm, handle));
  EXPECT_CODE(ncclCommDeregister(comm, handle), ncclInvalidArgument, "not a registration");
  int32_t* m = NULL;
  CHECK(ncclMemAlloc((void**)&m, 4096));
  EXPECT(((uintptr_t)m % 4096) == 0, "ncclMemAlloc alignment %p", (void*)m);
  m[0] = rank;
  CHECK(ncclAllReduce(m, m, 1, ncclInt32, ncclSum, comm, NULL));
  EXPECT(m[0] == nranks * (nranks - 1) / 2, "AllReduce on ncclMemAlloc memory %d", m[0]);
  CHECK(ncclMemFree(m));

  CHECK(ncclCommFinalize(comm));
  CHECK(ncclCommDestroy(comm));
  /* The handle is dead: an error, not a crash. */
  EXPECT_CODE(ncclAllReduce(send, recv, 1, ncclInt32, ncclSum, comm, NULL), ncclInvalidArgument,
              "not a live communicator");
  EXPECT_CODE(ncclCommCount(comm, &n), ncclInvalidArgument, "not a live communicator");
  EXPECT_CODE(ncclCommDestroy(comm), ncclInvalidArgument, "not a live communicator");
  free(send);
  free(recv);
}

static void mode_nonblocking(ncclUniqueId id) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = "nonblocking-test";
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
  EXPECT(r == ncclInProgress || r == ncclSuccess, "non-blocking init returned %d", r);
  EXPECT(comm != NULL, "no handle before the init finished");
  EXPECT(wait_comm(comm) == ncclSuccess, "init failed: %s", ncclGetLastError(NULL));
  int32_t v[3] = {rank, 1, -rank}, out[3];
  r = ncclAllReduce(v, out, 3, ncclInt32, ncclSum, comm, NULL);
  EXPECT(r == ncclInProgress || r == ncclSuccess, "non-blocking AllReduce returned %d", r);
  EXPECT(wait_comm(comm) == ncclSuccess, "AllReduce failed: %s", ncclGetLastError(NULL));
  EXPECT(out[0] == nranks * (nranks - 1) / 2 && out[1] == nranks && out[2] == -out[0], "AllReduce %d %d %d",
         out[0], out[1], out[2]);
  /* A non-blocking split inherits the parent's config. */
  ncclComm_t child = NULL;
  r = ncclCommSplit(comm, 0, rank, &child, NULL);
  EXPECT(r == ncclInProgress || r == ncclSuccess, "non-blocking split returned %d", r);
  EXPECT(wait_comm(child) == ncclSuccess, "split failed: %s", ncclGetLastError(NULL));
  int cn = 0;
  CHECK(ncclCommCount(child, &cn));
  EXPECT(cn == nranks, "child of %d ranks", cn);
  r = ncclCommFinalize(child);
  EXPECT(r == ncclInProgress || r == ncclSuccess, "non-blocking finalize returned %d", r);
  EXPECT(wait_comm(child) == ncclSuccess, "finalize failed: %s", ncclGetLastError(NULL));
  CHECK(ncclCommDestroy(child));
  CHECK(ncclCommAbort(comm));
}

static void mode_abort(ncclUniqueId id) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
  EXPECT(r == ncclInProgress || r == ncclSuccess, "init returned %d", r);
  EXPECT(wait_comm(comm) == ncclSuccess, "init failed: %s", ncclGetLastError(NULL));
  static int32_t big[1 << 16];
  if (rank == 0) {
    /* No peer ever joins this AllReduce: it stays in flight. */
    r = ncclAllReduce(big, big, 1 << 16, ncclInt32, ncclSum, comm, NULL);
    EXPECT(r == ncclInProgress, "AllReduce without peers returned %d", r);
    ncclResult_t state;
    CHECK(ncclCommGetAsyncError(comm, &state));
    EXPECT(state == ncclInProgress, "state %d while the AllReduce is in flight", state);
  }
  double t0 = now();
  CHECK(ncclCommAbort(comm));
  double took = now() - t0;
  /* Far below FERROCCL_TIMEOUT_SEC (120 s in the test): abort did not wait for
   * the operation's watchdog. */
  EXPECT(took < 30, "ncclCommAbort took %.1f s", took);
  EXPECT_CODE(ncclAllReduce(big, big, 1, ncclInt32, ncclSum, comm, NULL), ncclInvalidArgument,
              "not a live communicator");
  printf("abort took %.3f s\n", took);
}

static void mode_errors(ncclUniqueId id) {
  ncclComm_t bad = NULL;
  EXPECT_CODE(ncclCommInitRank(&bad, nranks, id, nranks), ncclInvalidArgument, "Invalid rank requested");
  EXPECT_CODE(ncclCommInitRank(&bad, 0, id, 0), ncclInvalidArgument, "Invalid rank requested");
  EXPECT_CODE(ncclCommInitRank(NULL, nranks, id, rank), ncclInvalidArgument, "newcomm argument is NULL");
  ncclConfig_t junk;
  memset(&junk, 0, sizeof(junk));
  junk.size = sizeof(junk);
  EXPECT_CODE(ncclCommInitRankConfig(&bad, nranks, id, rank, &junk), ncclInvalidArgument,
              "NCCL_CONFIG_INITIALIZER");
  ncclConfig_t blk = NCCL_CONFIG_INITIALIZER;
  blk.blocking = 5;
  EXPECT_CODE(ncclCommInitRankConfig(&bad, nranks, id, rank, &blk), ncclInvalidArgument,
              "Invalid config blocking attribute value 5");
  /* NCCL 2.30.7 parseCommConfig: collnetEnable is 0, 1 or unset. */
  ncclConfig_t cn = NCCL_CONFIG_INITIALIZER;
  cn.collnetEnable = 2;
  EXPECT_CODE(ncclCommInitRankConfig(&bad, nranks, id, rank, &cn), ncclInvalidArgument,
              "Invalid config collnetEnable attribute value 2");
  EXPECT_CODE(ncclGroupEnd(), ncclInvalidUsage, "not in a group call");
  EXPECT_CODE(ncclCommShrink(NULL, NULL, 0, &bad, NULL, 0), ncclInvalidUsage, "ncclCommShrink is not implemented");
  /* NCCL's device API (nccl_device.h): not in nccl.h, exported because frameworks link it (PyTorch 2.11 needs
   * ncclDevCommCreate/Destroy to load); declared here as the device headers declare them, with opaque structs. */
  {
    ncclResult_t (*create)(ncclComm_t, const void*, void*) =
        (ncclResult_t(*)(ncclComm_t, const void*, void*))dlsym(RTLD_DEFAULT, "ncclDevCommCreate");
    ncclResult_t (*destroy)(ncclComm_t, const void*) =
        (ncclResult_t(*)(ncclComm_t, const void*))dlsym(RTLD_DEFAULT, "pncclDevCommDestroy");
    EXPECT(create && destroy, "ncclDevCommCreate / pncclDevCommDestroy exported");
    if (create && destroy) {
      char dev[256];
      EXPECT_CODE(create(NULL, NULL, dev), ncclInvalidUsage, "ncclDevCommCreate is not implemented");
      EXPECT_CODE(destroy(NULL, dev), ncclInvalidUsage, "ncclDevCommDestroy is not implemented");
    }
  }
  EXPECT_CODE(ncclMemFree((void*)0x1234), ncclInvalidArgument, "was not allocated by ncclMemAlloc");
  EXPECT(strcmp(ncclGetErrorString(ncclInvalidArgument), "invalid argument (run with NCCL_DEBUG=WARN for details)") == 0,
         "error string");
  EXPECT(strcmp(ncclGetErrorString((ncclResult_t)77), "unknown result code") == 0, "unknown code string");

  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, nranks, id, rank));
  int32_t s[8] = {0}, d[8];
  EXPECT_CODE(ncclAllReduce(s, d, 8, (ncclDataType_t)42, ncclSum, comm, NULL), ncclInvalidArgument,
              "AllReduce : invalid type 42");
  EXPECT_CODE(ncclAllReduce(s, d, 8, ncclInt32, (ncclRedOp_t)-3, comm, NULL), ncclInvalidArgument,
              "invalid reduction operation -3");
  EXPECT_CODE(ncclAllReduce(s, d, 8, ncclInt32, (ncclRedOp_t)99, comm, NULL), ncclInvalidArgument,
              "reduction operation 99 unknown to this communicator");
  EXPECT_CODE(ncclBroadcast(s, d, 8, ncclInt32, nranks, comm, NULL), ncclInvalidArgument,
              "Broadcast : invalid root");
  EXPECT_CODE(ncclSend(s, 8, ncclInt32, -1, comm, NULL), ncclInvalidArgument, "Send : invalid root -1");
  EXPECT_CODE(ncclAllGather(s, d, SIZE_MAX / 2, ncclInt32, comm, NULL), ncclInvalidArgument, "overflows");
  EXPECT_CODE(ncclAllReduce(NULL, d, 8, ncclInt32, ncclSum, comm, NULL), ncclInvalidArgument, "NULL");
  EXPECT_CODE(ncclAllReduce(s, d, 8, ncclFloat8e5m2, ncclSum, comm, NULL), ncclInvalidUsage,
              "reductions on ncclFloat8e5m2 are not implemented");
  EXPECT_CODE(ncclAllReduce(s, d, 8, ncclInt32, ncclSum, NULL, NULL), ncclInvalidArgument,
              "AllReduce : comm argument is NULL");
  EXPECT_CODE(ncclAllReduce(s, d, 8, ncclInt32, ncclSum, (ncclComm_t)0x1000, NULL), ncclInvalidArgument,
              "not a live communicator");
  EXPECT_CODE(ncclRedOpDestroy(ncclSum, comm), ncclInvalidArgument, "builtin");
  /* The communicator still works after rejected calls. */
  s[0] = 1;
  CHECK(ncclAllReduce(s, d, 1, ncclInt32, ncclSum, comm, NULL));
  EXPECT(d[0] == nranks, "AllReduce after errors: %d", d[0]);
  /* Mismatched counts across ranks: the runtime's operation header check. */
  ncclResult_t r = ncclAllReduce(s, d, rank == 0 ? 5 : 6, ncclInt32, ncclSum, comm, NULL);
  EXPECT(r == ncclInvalidUsage || r == ncclRemoteError, "mismatched counts returned %d (%s)", r,
         ncclGetErrorString(r));
  printf("mismatch: rank %d got %d: %s\n", rank, r, ncclGetLastError(NULL));
  ncclResult_t state;
  CHECK(ncclCommGetAsyncError(comm, &state));
  EXPECT(state == r, "async error %d after the mismatch returned %d", state, r);
  CHECK(ncclCommDestroy(comm));
}

static void mode_onethread(void) {
  ncclComm_t comms[16], more[16];
  int32_t in[16][64], out[16][64];
  EXPECT(nranks <= 16, "at most 16 ranks");
  CHECK(ncclCommInitAll(comms, nranks, NULL));
  for (int round = 0; round < 2; round++) {
    /* Every rank from this thread: only a group can launch them together. */
    CHECK(ncclGroupStart());
    for (int r = 0; r < nranks; r++) {
      for (int i = 0; i < 64; i++) in[r][i] = r * 64 + i + round;
      CHECK(ncclAllReduce(in[r], out[r], 64, ncclInt32, ncclSum, comms[r], NULL));
    }
    CHECK(ncclGroupEnd());
    for (int r = 0; r < nranks; r++)
      for (int i = 0; i < 64; i++) {
        int32_t want = 64 * nranks * (nranks - 1) / 2 + nranks * (i + round);
        EXPECT(out[r][i] == want, "rank %d element %d: %d, expected %d", r, i, out[r][i], want);
      }
  }
  /* Inits inside a group run together at ncclGroupEnd. */
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id));
  CHECK(ncclGroupStart());
  for (int r = 0; r < nranks; r++) CHECK(ncclCommInitRank(&more[r], nranks, id, r));
  CHECK(ncclGroupEnd());
  CHECK(ncclGroupStart());
  for (int r = 0; r < nranks; r++) {
    in[r][0] = r + 1;
    /* The profiling name reaches the same implementation. */
    CHECK(pncclAllReduce(in[r], out[r], 1, ncclInt32, ncclProd, more[r], NULL));
  }
  CHECK(ncclGroupEnd());
  int32_t fact = 1;
  for (int r = 1; r <= nranks; r++) fact *= r;
  for (int r = 0; r < nranks; r++) EXPECT(out[r][0] == fact, "rank %d: product %d, expected %d", r, out[r][0], fact);
  for (int r = 0; r < nranks; r++) {
    int rr = -1;
    CHECK(ncclCommUserRank(more[r], &rr));
    EXPECT(rr == r, "rank %d reports %d", r, rr);
    CHECK(ncclCommDestroy(more[r]));
    CHECK(pncclCommDestroy(comms[r]));
  }
}

static void mode_rma(ncclComm_t comm) {
  enum { N = 4099 };
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  int32_t* src = calloc(N, sizeof(int32_t));
  int32_t* dst = calloc(N + 8, sizeof(int32_t));
  ncclWindow_t sw = NULL, dw = NULL;
  CHECK(ncclCommWindowRegister(comm, src, N * sizeof(int32_t), &sw, NCCL_WIN_COLL_SYMMETRIC));
  CHECK(ncclCommWindowRegister(comm, dst, (N + 8) * sizeof(int32_t), &dw, NCCL_WIN_COLL_SYMMETRIC));
  void* up = NULL;
  CHECK(ncclWinGetUserPtr(comm, dw, &up));
  EXPECT(up == dst, "ncclWinGetUserPtr gave %p, expected %p", up, (void*)dst);
  fill(src, N, rank * 1000);
  /* Into the next rank's window, 8 elements in. */
  CHECK(ncclPutSignal(src, N, ncclInt32, next, dw, 8 * sizeof(int32_t), 0, 0, 0, comm, NULL));
  ncclWaitSignalDesc_t d = {1, prev, 0, 0};
  CHECK(ncclWaitSignal(1, &d, comm, NULL));
  for (size_t i = 0; i < N; i++)
    EXPECT(dst[8 + i] == prev * 1000 + (int32_t)i, "PutSignal: dst[%zu] = %d from rank %d", 8 + i, dst[8 + i], prev);
  CHECK(ncclSignal(next, 0, 0, 0, comm, NULL));
  CHECK(ncclWaitSignal(1, &d, comm, NULL));
  /* Inside a group: a put, a wait and an AllReduce, all issued at ncclGroupEnd
   * (the one-sided calls first, as NCCL's RMA plans) and complete when it returns. */
  CHECK(ncclAllReduce(src, src, 1, ncclInt32, ncclSum, comm, NULL)); /* the peer read dst */
  fill(src, N, rank * 1000 + 7);
  int32_t red_in = rank + 1, red_out = 0;
  CHECK(ncclGroupStart());
  CHECK(ncclPutSignal(src + 1, N - 1, ncclInt32, next, dw, 0, 0, 0, 0, comm, NULL));
  CHECK(ncclAllReduce(&red_in, &red_out, 1, ncclInt32, ncclSum, comm, NULL));
  CHECK(ncclWaitSignal(1, &d, comm, NULL));
  CHECK(ncclGroupEnd());
  EXPECT(red_out == nranks * (nranks + 1) / 2, "AllReduce in an RMA group: %d", red_out);
  for (size_t i = 0; i + 1 < N; i++)
    EXPECT(dst[i] == prev * 1000 + 7 + (int32_t)(i + 1), "PutSignal in a group: dst[%zu] = %d from rank %d", i,
           dst[i], prev);
  EXPECT_CODE(ncclPutSignal(src, N, ncclInt32, next, dw, 0, 0, 0, 1, comm, NULL), ncclInvalidArgument, "flags");
  EXPECT_CODE(ncclPutSignal(src, N, ncclInt32, next, dw, 64, 0, 0, 0, comm, NULL), ncclInvalidArgument,
              "do not fit");
  EXPECT_CODE(ncclSignal(next, 3, 0, 0, comm, NULL), ncclInvalidArgument, "signal index");
  CHECK(ncclAllReduce(src, src, 1, ncclInt32, ncclSum, comm, NULL)); /* nobody still writes */
  CHECK(ncclCommWindowDeregister(comm, sw));
  CHECK(ncclCommWindowDeregister(comm, dw));
  EXPECT_CODE(ncclCommWindowDeregister(comm, dw), ncclInvalidArgument, "not a window registered");
  CHECK(ncclCommDestroy(comm));
  free(src);
  free(dst);
}

static void mode_rmanone(ncclComm_t comm) {
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  int32_t buf[16] = {0};
  ncclWindow_t w = NULL;
  /* Before any window: RMA not initialised yet (NCCL: ncclInvalidUsage). */
  EXPECT_CODE(ncclSignal(next, 0, 0, 0, comm, NULL), ncclInvalidUsage, "register a window");
  EXPECT_CODE(ncclCommWindowRegister(comm, buf, sizeof buf, &w, NCCL_WIN_COLL_SYMMETRIC), ncclInvalidUsage,
              "no RMA plugin");
  EXPECT(w == NULL, "a window came back without an RMA plugin");
  EXPECT_CODE(ncclSignal(next, 0, 0, 0, comm, NULL), ncclInvalidArgument, "host RMA is not supported");
  ncclWaitSignalDesc_t d = {1, prev, 0, 0};
  EXPECT_CODE(ncclWaitSignal(1, &d, comm, NULL), ncclInvalidArgument, "host RMA is not supported");
  CHECK(ncclAllReduce(buf, buf, 1, ncclInt32, ncclSum, comm, NULL)); /* the comm still works */
  CHECK(ncclCommDestroy(comm));
}

static void hex(const ncclUniqueId* id, char* out) {
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) sprintf(out + 2 * i, "%02x", (unsigned char)id->internal[i]);
}

static void unhex(const char* s, ncclUniqueId* id) {
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) {
    unsigned v;
    sscanf(s + 2 * i, "%2x", &v);
    id->internal[i] = (char)v;
  }
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s colls|nonblocking|abort|errors|onethread|rma|rmanone NRANKS\n", argv[0]);
    return 1;
  }
  const char* mode = argv[1];
  nranks = atoi(argv[2]);
  alarm(180);
  Dl_info info;
  if (dladdr((void*)ncclAllReduce, &info) && info.dli_fname) printf("libnccl: %s\n", info.dli_fname);
  ncclUniqueId id;
  const char* r_env = getenv("NCCLT_RANK");
  pid_t kids[64];
  if (strcmp(mode, "onethread") == 0) {
    mode_onethread();
    printf("ok %s rank 0\n", mode);
    return 0;
  }
  if (r_env == NULL) {
    CHECK(ncclGetUniqueId(&id));
    char h[2 * NCCL_UNIQUE_ID_BYTES + 1];
    hex(&id, h);
    setenv("NCCLT_ID", h, 1);
    fflush(stdout);
    for (int r = 1; r < nranks; r++) {
      char rs[16];
      snprintf(rs, sizeof rs, "%d", r);
      kids[r] = fork();
      if (kids[r] == 0) {
        setenv("NCCLT_RANK", rs, 1);
        execv("/proc/self/exe", argv);
        _exit(127);
      }
    }
  } else {
    rank = atoi(r_env);
    unhex(getenv("NCCLT_ID"), &id);
  }
  if (strcmp(mode, "colls") == 0) {
    ncclComm_t comm;
    CHECK(ncclCommInitRank(&comm, nranks, id, rank));
    mode_colls(comm);
  } else if (strcmp(mode, "rma") == 0) {
    ncclComm_t comm;
    CHECK(ncclCommInitRank(&comm, nranks, id, rank));
    mode_rma(comm);
  } else if (strcmp(mode, "rmanone") == 0) {
    ncclComm_t comm;
    CHECK(ncclCommInitRank(&comm, nranks, id, rank));
    mode_rmanone(comm);
  } else if (strcmp(mode, "nonblocking") == 0) {
    mode_nonblocking(id);
  } else if (strcmp(mode, "abort") == 0) {
    mode_abort(id);
  } else if (strcmp(mode, "errors") == 0) {
    mode_errors(id);
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 1;
  }
  printf("ok %s rank %d\n", mode, rank);
  fflush(stdout);
  int failed = 0;
  for (int r = 1; r < nranks && r_env == NULL; r++) {
    int st = 0;
    if (waitpid(kids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "rank %d failed (status %#x)\n", r, st);
      failed = 1;
    }
  }
  return failed ? 4 : 0;
}
