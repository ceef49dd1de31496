// allreduce_bench: the all-reduce bus bandwidth of MpiCommunicator (comm/mpi_communicator.h)
// against a plain MPI_Allreduce of the same buffer on the same ranks, in the same run.
// Run under mpirun: `mpirun -np 2 build/bench/allreduce_bench [FLAGS]` (--help lists them).
// Rank 0 prints one JSON line per size:
//   {"bench": "allreduce", "ranks": 2, "mb": 16, "communicator_gbps": …, "mpi_gbps": …,
//    "ratio": …}
// Bus bandwidth = 2·(n−1)/n · bytes / time (the ring's bytes per rank), from the median of
// --reps timed reductions of each kind, the two kinds interleaved.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_cli.h"
#include "comm/mpi_communicator.h"

namespace {

namespace fc = fullband::comm;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes_mb = {1, 4, 16, 64};
  int reps = 20;
  fullband::bench::CommandLine cl(
      "allreduce_bench",
      "All-reduce bus bandwidth of MpiCommunicator against MPI_Allreduce; run under mpirun.");
  cl.AddInt("--mb", &sizes_mb, "buffer sizes in MB, comma-separated", 1)
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cl.AddInt("--reps", &reps, "timed reductions of each kind per size", 1);
  if (const std::optional<int> exit = cl.Parse(argc, argv)) return *exit;
  auto session = fc::MpiSession::Init(&argc, &argv);
  if (!session.ok()) {
    std::fprintf(stderr, "allreduce_bench: %s\n", session.status().ToString().c_str());
    return 1;
  }
  {
    auto world = fc::MpiCommunicator::World();
    if (!world.ok()) return 1;
    fc::Communicator& c = **world;
    MPI_Comm plain;
    MPI_Comm_dup(MPI_COMM_WORLD, &plain);
    const int n = c.size();
    for (int64_t mb : sizes_mb) {
      const int64_t count = mb * (1 << 20) / 4;
      std::vector<float> buf(count, 1.0f);
      std::vector<double> ours, theirs;
      for (int r = 0; r < reps + 2; ++r) {  // two warm-up rounds
        MPI_Barrier(plain);
        auto t0 = std::chrono::steady_clock::now();
        if (!c.AllReduce(buf.data(), count, fc::CommType::kF32, fc::ReduceOp::kSum).ok()) return 1;
        const double a =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        MPI_Barrier(plain);
        t0 = std::chrono::steady_clock::now();
        MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, plain);
        const double b =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fill(buf.begin(), buf.end(), 1.0f);
        if (r >= 2) {
          ours.push_back(a);
          theirs.push_back(b);
        }
      }
      const double bus = 2.0 * (n - 1) / n * count * 4 / 1e9;
      const double ours_gbps = bus / Median(ours), mpi_gbps = bus / Median(theirs);
      if (c.rank() == 0) {
        std::printf(
            "{\"bench\": \"allreduce\", \"ranks\": %d, \"mb\": %ld, \"communicator_gbps\": %.3f, "
            "\"mpi_gbps\": %.3f, \"ratio\": %.3f}\n",
            n, mb, ours_gbps, mpi_gbps, ours_gbps / mpi_gbps);
        std::fflush(stdout);
      }
    }
    MPI_Comm_free(&plain);
  }
  return 0;
}
