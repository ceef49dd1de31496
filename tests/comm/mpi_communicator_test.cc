// MpiCommunicator under mpirun (CTest label `mpi`, 2 and 4 ranks): the Communicator contract
// (collective_checks.h) on every rank. Exits non-zero when any rank's check fails.
#include "comm/mpi_communicator.h"

#include <cstdio>

#include "tests/comm/collective_checks.h"

int main(int argc, char** argv) {
  using namespace fullband::comm;
  auto session = MpiSession::Init(&argc, &argv);
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", session.status().ToString().c_str());
    return 1;
  }
  int failed = 0;
  {
    auto world = MpiCommunicator::World();
    if (!world.ok()) {
      std::fprintf(stderr, "%s\n", world.status().ToString().c_str());
      return 1;
    }
    (*world)->set_timeout(std::chrono::seconds(60));
    const std::string why = CheckCollectives(**world);
    if (!why.empty()) std::fprintf(stderr, "FAILED: %s\n", why.c_str());
    int64_t bad = why.empty() ? 0 : 1;
    if (!(*world)->AllReduce(&bad, 1, CommType::kI64, ReduceOp::kSum).ok()) bad = 1;
    failed = bad != 0;
    if ((*world)->rank() == 0) {
      std::printf("%s: %d ranks\n", failed ? "FAILED" : "passed", (*world)->size());
    }
  }
  return failed;
}
