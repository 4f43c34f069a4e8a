// The Open MPI baseline for allreduce_bench: MPI_Allreduce (in place, float sum) of the
// same sizes, one rank per process. Run under mpirun; rank 0 reports.
//
//   BM_MpiAllreduce/<bytes>/ranks:<N>
//
// Counters as in allreduce_bench (nccl-tests' definitions): algbw = vector bytes / time
// of one allreduce (GB/s, rank 0's clock), busbw = algbw x 2(N-1)/N.
//
// To compare with gloo's TCP transport, keep Open MPI on TCP over loopback as well
// (by default it would use shared memory between processes on one host):
//   mpirun --oversubscribe --allow-run-as-root -np 2 --mca btl tcp,self
//       --mca btl_tcp_if_include lo allreduce_mpi_bench --benchmark_format=csv
// (one command line).
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <algorithm>
#include <string>
#include <vector>

namespace {

// Ranks other than 0 run the same loops but report nothing.
class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

void BM_MpiAllreduce(benchmark::State& state, std::size_t bytes, int size) {
  std::vector<float> data(bytes / sizeof(float), 0.0f);
  MPI_Barrier(MPI_COMM_WORLD);
  double total = 0;
  for (auto _ : state) {
    const double start = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    const double seconds = MPI_Wtime() - start;
    total += seconds;
    state.SetIterationTime(seconds);
  }
  const double algbw = static_cast<double>(bytes) * static_cast<double>(state.iterations()) /
                       total / 1e9;
  state.counters["algbw"] = algbw;
  state.counters["busbw"] = algbw * 2.0 * (size - 1) / size;
  state.counters["ranks"] = size;
  state.counters["bytes"] = static_cast<double>(bytes);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Fixed iteration counts (the same as allreduce_bench's) so every rank runs the same
  // number of allreduces.
  for (std::size_t bytes = 4 << 10; bytes <= (64u << 20); bytes *= 4) {
    const auto iterations = std::clamp<int64_t>((int64_t{256} << 20) / int64_t(bytes), 5, 400);
    const std::string name =
        "BM_MpiAllreduce/" + std::to_string(bytes) + "/ranks:" + std::to_string(size);
    benchmark::RegisterBenchmark(name.c_str(), BM_MpiAllreduce, bytes, size)
        ->Iterations(iterations)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  if (rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    NullReporter null_reporter;
    benchmark::RunSpecifiedBenchmarks(&null_reporter);
  }
  benchmark::Shutdown();
  MPI_Finalize();
  return 0;
}
