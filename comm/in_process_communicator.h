// InProcessCommunicator: a group of ranks that are threads of one process (or a single rank
// alone), for unit tests of parallel layouts and for `fullband train` without mpirun. It keeps
// the Communicator contract (communicator.h) exactly: collectives match by their order on each
// rank, reductions combine ranks in rank order, and a rank that never joins a collective makes
// the others' Wait time out — so a test can run every layout against one rank, and a hang
// against the timeout, without MPI.
//
// A collective completes when its last rank posts it: that rank's thread computes the result
// for all of them. Posting never blocks, so non-blocking collectives may be issued ahead.
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace fullband::comm {

class InProcessCommunicator final : public Communicator {
 public:
  // `size` communicators, one per rank, sharing one group (size >= 1). Each is used by the
  // thread that plays its rank.
  static std::vector<std::unique_ptr<Communicator>> CreateGroup(int size);

  int rank() const override { return rank_; }
  int size() const override;
  std::string name() const override { return "in-process"; }

  std::unique_ptr<Work> AllReduceAsync(void* data, int64_t count, CommType type,
                                       ReduceOp op) override;
  std::unique_ptr<Work> ReduceScatterAsync(const void* in, void* out, int64_t count, CommType type,
                                           ReduceOp op) override;
  std::unique_ptr<Work> AllGatherAsync(const void* in, void* out, int64_t count,
                                       CommType type) override;
  std::unique_ptr<Work> BroadcastAsync(void* data, int64_t bytes, int root) override;
  std::unique_ptr<Work> BarrierAsync() override;
  StatusOr<std::unique_ptr<Communicator>> Split(int color, int key) override;

  struct Group;
  struct Post;

 private:
  InProcessCommunicator(std::shared_ptr<Group> group, int rank)
      : group_(std::move(group)), rank_(rank) {}
  std::unique_ptr<Work> Submit(Post post);

  std::shared_ptr<Group> group_;
  int rank_;
  int64_t sequence_ = 0;  // collectives this rank has posted
};

}  // namespace fullband::comm
