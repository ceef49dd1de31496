// DistributedOptimizer: the optimizer step of one rank of a worker group, whatever the layout —
// AdamW (optimizer.h) on this rank's parameters, clipped by the norm of the *global* gradient,
// with the moments either whole or, under ZeRO-1, this data-parallel rank's shard only (Note
// [ZeRO-1] in distributed_optimizer.cc). The trainer calls Step once its gradients are summed
// over the data-parallel group (or, under ZeRO-1, still unsummed: Step reduce-scatters them).
//
// The global norm is over every rank that holds a part of the gradients: the TP group's
// shares (a replicated parameter counted once, on TP rank 0) and, under ZeRO-1, every DP
// rank's shard.
//
// Not thread-safe: one step at a time from the training thread; every rank of the groups calls
// Step together.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "comm/communicator.h"
#include "common/config.h"
#include "common/status.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "ops/arena.h"

namespace fullband::model {

class DistributedOptimizer {
 public:
  // The groups the step reduces over (comm/process_groups.h); they outlive the optimizer.
  struct Groups {
    comm::Communicator* world = nullptr;  // every rank (the norm under ZeRO-1)
    comm::Communicator* tp = nullptr;     // host values of the TP group; null for tp = 1
    // The backend's memory of the DP group (ZeRO-1; its rank and size are this rank's place in
    // the DP group).
    comm::Communicator* dp_device = nullptr;
  };

  // What ModelShape::param_multiple must be for the model this optimizer will step: ZeRO-1
  // cuts the arenas into dp equal, 16-float-aligned shards.
  static int64_t ParamMultiple(bool zero1, int dp) { return zero1 ? 16 * int64_t{dp} : 1; }

  // Allocates the moments (of the whole arena, or of this rank's shard under `zero1`) and, under
  // ZeRO-1, the shard's buffers. `model` (created with ParamMultiple) outlives the optimizer.
  // RESOURCE_EXHAUSTED if the device is full.
  static StatusOr<std::unique_ptr<DistributedOptimizer>> Create(const OptimConfig& optim,
                                                                bool zero1, Model* model,
                                                                const Groups& groups);

  // One update at step `step` (0-based) of `total_steps`. Errors: the communicators'.
  StatusOr<OptimizerStats> Step(int64_t step, int64_t total_steps);

  // Whether the data-parallel gradient sum is Step's (ZeRO-1's reduce-scatter) rather than the
  // caller's.
  bool reduces_gradients() const { return zero1_; }
  // The moments, of the range [begin(), end()) of the arena: what checkpoints save.
  AdamW& adamw() { return *adamw_; }

 private:
  DistributedOptimizer(bool zero1, Model* model, const Groups& groups)
      : zero1_(zero1), model_(model), groups_(groups) {}
  StatusOr<OptimizerStats> ShardedStep(int64_t step, int64_t total_steps);
  // Σ g² of `grads`, the arena's floats from `begin` on, as this rank's part of the global sum.
  double GradSquares(ops::Tensor grads, int64_t begin) const;

  bool zero1_;
  Model* model_;
  Groups groups_;
  std::unique_ptr<AdamW> adamw_;
  // ZeRO-1: this rank's shard of the arena, its summed gradients and a copy of its updated
  // parameters for the all-gather (the backend's memory).
  int64_t shard_begin_ = 0, shard_floats_ = 0;
  std::optional<ops::Arena> shard_arena_;
  ops::Tensor grad_shard_, param_shard_;
};

}  // namespace fullband::model
