/* Open MPI baseline for the shared-memory transport comparison (issue 15):
 * MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block and MPI_Bcast of
 * float32 (sum), timed like nccl-tests and ferroccl-perf (warmup, then iters,
 * the slowest rank's average per op), with nccl-tests' size and bus-bandwidth
 * conventions: "size" is the total buffer (AllGather: the gathered output,
 * ReduceScatter: the scattered input), busbw = algbw x 2(n-1)/n (AllReduce),
 * (n-1)/n (AllGather, ReduceScatter), 1 (Broadcast, root 0).
 * One line per size: op size(B) count time(us) algbw(GB/s) busbw(GB/s).
 *
 * Build: mpicc -O2 -o /tmp/mpi_colls benchmarks/mpi_colls.c
 * Run (Open MPI 4.1, default shared memory = the vader BTL):
 *   mpirun --oversubscribe --allow-run-as-root -np 2 /tmp/mpi_colls all_reduce 8 67108864 8 20 5
 * Args: op (all_reduce | all_gather | reduce_scatter | broadcast), minbytes,
 *       maxbytes, factor, iters, warmup. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { AR, AG, RS, BC };

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const char *name = argc > 1 ? argv[1] : "all_reduce";
  int op;
  if (!strcmp(name, "all_reduce")) op = AR;
  else if (!strcmp(name, "all_gather")) op = AG;
  else if (!strcmp(name, "reduce_scatter")) op = RS;
  else if (!strcmp(name, "broadcast")) op = BC;
  else {
    if (rank == 0) fprintf(stderr, "unknown op %s\n", name);
    MPI_Abort(MPI_COMM_WORLD, 2);
    return 2;
  }
  size_t minb = argc > 2 ? strtoull(argv[2], NULL, 0) : 8;
  size_t maxb = argc > 3 ? strtoull(argv[3], NULL, 0) : (64u << 20);
  size_t factor = argc > 4 ? strtoull(argv[4], NULL, 0) : 2;
  int iters = argc > 5 ? atoi(argv[5]) : 20;
  int warmup = argc > 6 ? atoi(argv[6]) : 5;
  if (factor < 2) factor = 2;
  float *in = malloc(maxb), *out = malloc(maxb);
  if (!in || !out) {
    fprintf(stderr, "out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (size_t i = 0; i < maxb / sizeof(float); i++) in[i] = (float)((rank + i) % 17);
  memset(out, 0, maxb);
  double bus = op == AR ? 2.0 * (n - 1) / n : op == BC ? 1.0 : (double)(n - 1) / n;
  if (rank == 0) printf("# %-14s %11s %12s %10s %8s %8s\n", "op", "size", "count", "time(us)", "algbw", "busbw");
  for (size_t bytes = minb; bytes <= maxb; bytes *= factor) {
    /* count = elements per rank's block for AG/RS (nccl-tests: size / nranks), total otherwise */
    size_t total = bytes / sizeof(float);
    size_t count = (op == AG || op == RS) ? total / n : total;
    if (count < 1) count = 1;
    size_t shown = (op == AG || op == RS) ? count * n * sizeof(float) : count * sizeof(float);
    for (int i = 0; i < warmup; i++) {
      switch (op) {
      case AR: MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
      case AG: MPI_Allgather(in, (int)count, MPI_FLOAT, out, (int)count, MPI_FLOAT, MPI_COMM_WORLD); break;
      case RS: MPI_Reduce_scatter_block(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
      case BC: MPI_Bcast(rank == 0 ? in : out, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
      }
    }
    /* Timed loop (separate from the warmup so nothing else is inside it). */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
      switch (op) {
      case AR: MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
      case AG: MPI_Allgather(in, (int)count, MPI_FLOAT, out, (int)count, MPI_FLOAT, MPI_COMM_WORLD); break;
      case RS: MPI_Reduce_scatter_block(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
      case BC: MPI_Bcast(rank == 0 ? in : out, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
      }
    }
    double dt = (MPI_Wtime() - t0) / iters;
    double maxdt;
    MPI_Allreduce(&dt, &maxdt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double algbw = (double)shown / maxdt / 1e9;
    if (rank == 0)
      printf("  %-14s %11zu %12zu %10.2f %8.3f %8.3f\n", name, shown, count, maxdt * 1e6, algbw, algbw * bus);
  }
  free(in);
  free(out);
  MPI_Finalize();
  return 0;
}
