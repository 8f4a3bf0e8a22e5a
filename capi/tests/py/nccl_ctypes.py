"""NCCL from Python through ctypes, as a framework binds it: the library is
opened by path, the unique id travels to the other ranks (processes started
here) in the environment, buffers are ctypes arrays on the host and the stream
is NULL. Every collective, a group, split, a non-blocking communicator polled
with ncclCommGetAsyncError, an error code, and abort; results checked.

usage: nccl_ctypes.py LIBNCCL NRANKS   (prints "ok python rank R" per rank)
"""
import ctypes
import os
import subprocess
import sys
import time
from ctypes import POINTER, byref, c_char, c_char_p, c_float, c_int, c_int32, c_size_t, c_uint, c_void_p

LIB, NRANKS = sys.argv[1], int(sys.argv[2])
RANK = int(os.environ.get("NCCLPY_RANK", "0"))
nccl = ctypes.CDLL(LIB)

ncclSuccess, ncclInvalidArgument, ncclInProgress = 0, 4, 7
ncclInt32, ncclFloat32 = 2, 7
ncclSum, ncclMax = 0, 2
INT_MIN = -(2**31)


class ncclUniqueId(ctypes.Structure):
    _fields_ = [("internal", c_char * 128)]


class ncclConfig(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("magic", c_uint), ("version", c_uint)] + [
        (n, c_int) for n in ("blocking", "cgaClusterSize", "minCTAs", "maxCTAs")
    ] + [("netName", c_char_p), ("splitShare", c_int), ("trafficClass", c_int), ("commName", c_char_p)] + [
        (n, c_int)
        for n in (
            "collnetEnable",
            "CTAPolicy",
            "shrinkShare",
            "nvlsCTAs",
            "nChannelsPerNetPeer",
            "nvlinkCentricSched",
            "graphUsageMode",
            "numRmaCtx",
            "maxP2pPeers",
            "graphStreamOrdering",
        )
    ]


def config_initializer():
    c = ncclConfig()
    c.size, c.magic, c.version = ctypes.sizeof(ncclConfig), 0xCAFEBEEF, 23007
    for name, typ in ncclConfig._fields_[3:]:
        if typ is c_int:
            setattr(c, name, INT_MIN)
    return c


comm_t = c_void_p
nccl.ncclGetErrorString.restype = c_char_p
nccl.ncclGetLastError.restype = c_char_p
nccl.ncclGetLastError.argtypes = [comm_t]
for name, args in {
    "ncclGetVersion": [POINTER(c_int)],
    "ncclGetUniqueId": [POINTER(ncclUniqueId)],
    "ncclCommInitRank": [POINTER(comm_t), c_int, ncclUniqueId, c_int],
    "ncclCommInitRankConfig": [POINTER(comm_t), c_int, ncclUniqueId, c_int, POINTER(ncclConfig)],
    "ncclCommGetAsyncError": [comm_t, POINTER(c_int)],
    "ncclCommCount": [comm_t, POINTER(c_int)],
    "ncclCommUserRank": [comm_t, POINTER(c_int)],
    "ncclCommSplit": [comm_t, c_int, c_int, POINTER(comm_t), c_void_p],
    "ncclCommDestroy": [comm_t],
    "ncclCommAbort": [comm_t],
    "ncclAllReduce": [c_void_p, c_void_p, c_size_t, c_int, c_int, comm_t, c_void_p],
    "ncclAllGather": [c_void_p, c_void_p, c_size_t, c_int, comm_t, c_void_p],
    "ncclReduceScatter": [c_void_p, c_void_p, c_size_t, c_int, c_int, comm_t, c_void_p],
    "ncclBroadcast": [c_void_p, c_void_p, c_size_t, c_int, c_int, comm_t, c_void_p],
    "ncclReduce": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_int, comm_t, c_void_p],
    "ncclAlltoAll": [c_void_p, c_void_p, c_size_t, c_int, comm_t, c_void_p],
    "ncclGather": [c_void_p, c_void_p, c_size_t, c_int, c_int, comm_t, c_void_p],
    "ncclScatter": [c_void_p, c_void_p, c_size_t, c_int, c_int, comm_t, c_void_p],
    "ncclSend": [c_void_p, c_size_t, c_int, c_int, comm_t, c_void_p],
    "ncclRecv": [c_void_p, c_size_t, c_int, c_int, comm_t, c_void_p],
    "ncclGroupStart": [],
    "ncclGroupEnd": [],
}.items():
    getattr(nccl, name).argtypes = args
    getattr(nccl, name).restype = c_int


def check(r, what):
    if r != ncclSuccess:
        raise SystemExit(
            f"rank {RANK}: {what} -> {r} ({nccl.ncclGetErrorString(r).decode()}): {nccl.ncclGetLastError(None).decode()}"
        )


def expect(cond, what):
    if not cond:
        raise SystemExit(f"rank {RANK}: FAILED: {what}")


def wait(comm):
    """Polls ncclCommGetAsyncError while the communicator is in progress (60 s at most)."""
    state, t0 = c_int(ncclInProgress), time.monotonic()
    while state.value == ncclInProgress:
        check(nccl.ncclCommGetAsyncError(comm, byref(state)), "ncclCommGetAsyncError")
        expect(time.monotonic() - t0 < 60, "still in progress after 60 s")
        time.sleep(0.001)
    return state.value


def ints(values):
    return (c_int32 * len(values))(*values)


def main():
    uid, uid2 = ncclUniqueId(), ncclUniqueId()
    children = []
    if RANK == 0:
        # Two ids: one for a blocking communicator, one for a non-blocking one.
        check(nccl.ncclGetUniqueId(byref(uid)), "ncclGetUniqueId")
        check(nccl.ncclGetUniqueId(byref(uid2)), "ncclGetUniqueId")
        env = dict(os.environ, NCCLPY_ID=bytes(uid).hex(), NCCLPY_ID2=bytes(uid2).hex())
        for r in range(1, NRANKS):
            children.append(subprocess.Popen([sys.executable, __file__, LIB, str(NRANKS)], env=dict(env, NCCLPY_RANK=str(r))))
    else:
        ctypes.memmove(byref(uid), bytes.fromhex(os.environ["NCCLPY_ID"]), 128)
        ctypes.memmove(byref(uid2), bytes.fromhex(os.environ["NCCLPY_ID2"]), 128)
    n, r = NRANKS, RANK

    version = c_int()
    check(nccl.ncclGetVersion(byref(version)), "ncclGetVersion")
    expect(version.value == 23007, f"version {version.value}")
    comm = comm_t()
    check(nccl.ncclCommInitRank(byref(comm), n, uid, r), "ncclCommInitRank")
    cnt, me = c_int(), c_int()
    check(nccl.ncclCommCount(comm, byref(cnt)), "ncclCommCount")
    check(nccl.ncclCommUserRank(comm, byref(me)), "ncclCommUserRank")
    expect((cnt.value, me.value) == (n, r), f"count/rank {cnt.value}/{me.value}")

    C = 257
    send, recv = ints([r * 1000 + i for i in range(C)]), (c_int32 * (C * n))()
    check(nccl.ncclAllReduce(send, recv, C, ncclInt32, ncclSum, comm, None), "ncclAllReduce")
    expect(list(recv[:C]) == [1000 * n * (n - 1) // 2 + n * i for i in range(C)], "AllReduce")

    f = (c_float * 2)(float(r), -float(r))
    fo = (c_float * 2)()
    check(nccl.ncclAllReduce(f, fo, 2, ncclFloat32, ncclMax, comm, None), "ncclAllReduce max")
    expect((fo[0], fo[1]) == (n - 1.0, 0.0), f"Max {list(fo)}")

    check(nccl.ncclAllGather(send, recv, C, ncclInt32, comm, None), "ncclAllGather")
    expect(list(recv) == [q * 1000 + i for q in range(n) for i in range(C)], "AllGather")

    big = ints([r + j for j in range(C * n)])
    out = (c_int32 * C)()
    check(nccl.ncclReduceScatter(big, out, C, ncclInt32, ncclSum, comm, None), "ncclReduceScatter")
    expect(list(out) == [n * (n - 1) // 2 + n * (r * C + i) for i in range(C)], "ReduceScatter")

    root = n - 1
    b = ints([7 * i if r == root else 0 for i in range(C)])
    check(nccl.ncclBroadcast(b, b, C, ncclInt32, root, comm, None), "ncclBroadcast")
    expect(list(b) == [7 * i for i in range(C)], "Broadcast")

    one, tot = ints([r + 1]), ints([0])
    check(nccl.ncclReduce(one, tot, 1, ncclInt32, ncclSum, 0, comm, None), "ncclReduce")
    expect(r != 0 or tot[0] == n * (n + 1) // 2, f"Reduce {tot[0]}")

    check(nccl.ncclGroupStart(), "ncclGroupStart")
    check(nccl.ncclSend(send, C, ncclInt32, (r + 1) % n, comm, None), "ncclSend")
    check(nccl.ncclRecv(out, C, ncclInt32, (r - 1) % n, comm, None), "ncclRecv")
    check(nccl.ncclGroupEnd(), "ncclGroupEnd")
    expect(list(out) == [((r - 1) % n) * 1000 + i for i in range(C)], "Send/Recv")

    a2a = ints([r * 100 + j for j in range(n)])
    a2o = (c_int32 * n)()
    check(nccl.ncclAlltoAll(a2a, a2o, 1, ncclInt32, comm, None), "ncclAlltoAll")
    expect(list(a2o) == [q * 100 + r for q in range(n)], f"AlltoAll {list(a2o)}")

    g = (c_int32 * n)()
    check(nccl.ncclGather(ints([r * 3]), g, 1, ncclInt32, 0, comm, None), "ncclGather")
    expect(r != 0 or list(g) == [q * 3 for q in range(n)], f"Gather {list(g)}")
    s = ints([q * 5 for q in range(n)])
    so = ints([0])
    check(nccl.ncclScatter(s, so, 1, ncclInt32, 0, comm, None), "ncclScatter")
    expect(so[0] == r * 5, f"Scatter {so[0]}")

    # An error path: a datatype outside ncclDataType_t.
    bad = nccl.ncclAllReduce(send, recv, C, 99, ncclSum, comm, None)
    expect(bad == ncclInvalidArgument, f"bad dtype returned {bad}")
    expect(b"invalid type 99" in nccl.ncclGetLastError(None), "last error text")

    child = comm_t()
    check(nccl.ncclCommSplit(comm, r % 2, r, byref(child), None), "ncclCommSplit")
    csum = ints([0])
    check(nccl.ncclAllReduce(ints([r]), csum, 1, ncclInt32, ncclSum, child, None), "child AllReduce")
    expect(csum[0] == sum(q for q in range(n) if q % 2 == r % 2), f"child sum {csum[0]}")
    check(nccl.ncclCommDestroy(child), "ncclCommDestroy child")
    check(nccl.ncclCommDestroy(comm), "ncclCommDestroy")

    # A non-blocking communicator (config.blocking = 0), polled as frameworks do.
    cfg = config_initializer()
    cfg.blocking = 0
    nb = comm_t()
    res = nccl.ncclCommInitRankConfig(byref(nb), n, uid2, r, byref(cfg))
    expect(res in (ncclSuccess, ncclInProgress), f"non-blocking init returned {res}")
    expect(wait(nb) == ncclSuccess, f"non-blocking init failed: {nccl.ncclGetLastError(None)}")
    x = ints([r])
    res = nccl.ncclAllReduce(x, x, 1, ncclInt32, ncclSum, nb, None)
    expect(res in (ncclSuccess, ncclInProgress), f"non-blocking AllReduce returned {res}")
    expect(wait(nb) == ncclSuccess, "non-blocking AllReduce failed")
    expect(x[0] == n * (n - 1) // 2, f"non-blocking AllReduce {x[0]}")
    check(nccl.ncclCommAbort(nb), "ncclCommAbort")
    expect(nccl.ncclCommCount(nb, byref(cnt)) == ncclInvalidArgument, "use after abort")

    print(f"ok python rank {r}", flush=True)
    for c in children:
        expect(c.wait(timeout=120) == 0, f"a child rank failed ({c.returncode})")


main()
