// Optimizer: AdamW with decoupled weight decay over the model's parameter arena, global-norm
// gradient clipping, and the warmup–stable–decay learning-rate schedule.
//
// The moments m and v live in one arena each, carved by the same ParameterTable as the
// parameters, over a range [begin, end) of it: the whole table, or under ZeRO-1 one
// data-parallel rank's shard (docs/PARALLEL.md). Weight decay applies to matrices, and to the
// embedding / norm gains only when configured.
#pragma once

#include <memory>
#include <optional>

#include "common/config.h"
#include "model/param_table.h"
#include "ops/arena.h"
#include "ops/backend.h"

namespace fullband::model {

// Learning rate of step `step` (0-based) of `total_steps`: linear warmup over warmup_steps to
// lr, constant, then linear decay to 0 over the last cooldown_fraction of the steps.
double LearningRate(const OptimConfig& optim, int64_t step, int64_t total_steps);

struct OptimizerStats {
  double grad_norm = 0;   // global L2 norm before clipping
  double clip_scale = 1;  // factor applied to the gradients (1: not clipped)
  double lr = 0;
};

class AdamW {
 public:
  // Allocates and zeroes the moments of the arena range [begin, end) (floats; end = -1: the
  // whole table), RESOURCE_EXHAUSTED if the device is full.
  static StatusOr<std::unique_ptr<AdamW>> Create(const OptimConfig& optim,
                                                 const ParameterTable& table, ops::Backend* backend,
                                                 int64_t begin = 0, int64_t end = -1);

  // One update of `params` from `grads` (both carved by the table) at step `step` (0-based),
  // clipped by their global norm. Requires the whole-table range.
  OptimizerStats Step(ops::Tensor params, ops::Tensor grads, int64_t step, int64_t total_steps);
  // The same on the range only: `params` and `grads` hold its end − begin floats (element i is
  // arena element begin + i), and `grad_norm` is the global norm of all gradients, which the
  // caller computes when they are spread over ranks.
  OptimizerStats StepRange(ops::Tensor params, ops::Tensor grads, int64_t step, int64_t total_steps,
                           double grad_norm);

  // The moments of the range [begin(), end()) of the arena (end − begin floats each), which
  // checkpoints save and restore.
  ops::Tensor m() const { return m_all_; }
  ops::Tensor v() const { return v_all_; }
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }

 private:
  AdamW(const OptimConfig& optim, const ParameterTable& table, ops::Backend* backend, int64_t begin,
        int64_t end)
      : optim_(optim), table_(table), backend_(backend), begin_(begin), end_(end) {}

  OptimConfig optim_;
  const ParameterTable& table_;
  ops::Backend* backend_;
  int64_t begin_, end_;
  std::optional<ops::Arena> m_, v_;
  ops::Tensor m_all_, v_all_;
};

}  // namespace fullband::model
