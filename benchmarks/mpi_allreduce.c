/* Baseline for the ferroccl AllReduce benchmark (issue 4): MPI_Allreduce of
 * float32 sum, timed like nccl-tests (warmup, then iters, average per op), one
 * line per size: size(B) count time(us) algbw(GB/s) busbw(GB/s).
 * Build: mpicc -O2 -o mpi_allreduce benchmarks/mpi_allreduce.c
 * Run:   mpirun --oversubscribe --allow-run-as-root --mca btl tcp,self \
 *               --mca btl_tcp_if_include lo -np 2 ./mpi_allreduce 8 67108864 4 20 5 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  size_t minb = argc > 1 ? strtoull(argv[1], NULL, 0) : 8;
  size_t maxb = argc > 2 ? strtoull(argv[2], NULL, 0) : (64u << 20);
  size_t factor = argc > 3 ? strtoull(argv[3], NULL, 0) : 2;
  int iters = argc > 4 ? atoi(argv[4]) : 20;
  int warmup = argc > 5 ? atoi(argv[5]) : 5;
  if (factor < 2) factor = 2;
  float *in = malloc(maxb), *out = malloc(maxb);
  if (!in || !out) { fprintf(stderr, "out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
  for (size_t i = 0; i < maxb / sizeof(float); i++) in[i] = (float)((rank + i) % 17);
  if (rank == 0) printf("#%11s %12s %10s %8s %8s\n", "size", "count", "time(us)", "algbw", "busbw");
  for (size_t bytes = minb; bytes <= maxb; bytes *= factor) {
    int count = (int)(bytes / sizeof(float));
    if (count < 1) count = 1;
    for (int i = 0; i < warmup; i++) MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double dt = (MPI_Wtime() - t0) / iters;
    double maxdt;
    MPI_Allreduce(&dt, &maxdt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double sz = (double)count * sizeof(float);
    double algbw = sz / maxdt / 1e9;
    double busbw = algbw * 2.0 * (nranks - 1) / nranks;
    if (rank == 0) printf(" %11zu %12d %10.2f %8.3f %8.3f\n", (size_t)count * sizeof(float), count, maxdt * 1e6, algbw, busbw);
  }
  free(in);
  free(out);
  MPI_Finalize();
  return 0;
}
