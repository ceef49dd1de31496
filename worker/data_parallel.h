// GradientReducer: data-parallel gradient all-reduce in buckets, overlapped with backward
// (docs/PARALLEL.md, Note [Gradient buckets]).
//
// The parameters are dealt, in reverse table order (the order backward finishes them), into
// buckets of about `bucket_bytes`, each a contiguous range of the gradient arena. Model::Step
// reports every range whose gradients are final (StepOptions::grads_final → MarkFinal); a
// bucket's all-reduce starts as soon as all its parameters are final, on the communicator's
// progress thread, while backward goes on. Finish starts what is left (the embedding and the
// feedback parameters, final only at the end of backward) and waits for everything.
//
// Each rank's gradients must already be its share of the global ones (StepOptions::loss_count
// is the global target count), so the all-reduce is a plain sum. Not thread-safe: one step at a
// time from the training thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "common/status.h"
#include "model/param_table.h"

namespace fullband::worker {

class GradientReducer {
 public:
  // `grads` is the gradient arena carved by `table`, in the memory `dp` reduces (the backend's:
  // MPI on the CPU, NCCL on CUDA); `dp` and `table` outlive the reducer.
  GradientReducer(const model::ParameterTable& table, float* grads, comm::Communicator* dp,
                  int64_t bucket_bytes);

  // Starts a step: no parameter is final yet.
  void BeginStep();
  // Marks every parameter inside [begin, end) (floats of the arena) final and starts the
  // all-reduce of each bucket that became complete.
  void MarkFinal(int64_t begin, int64_t end);
  // Starts the buckets not started yet and waits for all; `timeout` bounds each wait.
  // Errors: the communicator's (DEADLINE_EXCEEDED: a peer is gone).
  Status Finish(std::chrono::milliseconds timeout);

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // Of the last step: seconds Finish spent waiting for reductions (communication not hidden
  // behind backward, and any wait for a slower rank), how many buckets had started before
  // Finish was called, and the fraction of the gradient bytes whose all-reduce had completed
  // by then (hidden behind backward).
  double exposed_seconds() const { return exposed_seconds_; }
  int started_early() const { return started_early_; }
  double hidden_fraction() const { return hidden_fraction_; }

 private:
  struct Bucket {
    int64_t begin = 0, end = 0;        // floats of the arena
    int specs = 0;                     // parameters in the bucket
    int pending = 0;                   // of them, not final yet this step
    std::unique_ptr<comm::Work> work;  // the all-reduce in flight
  };
  void Start(Bucket& b);

  const model::ParameterTable& table_;
  float* grads_;
  comm::Communicator* dp_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;  // per spec
  std::vector<bool> final_;     // per spec, this step
  double exposed_seconds_ = 0;
  int started_early_ = 0;
  double hidden_fraction_ = 0;
};

}  // namespace fullband::worker
