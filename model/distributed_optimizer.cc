#include "model/distributed_optimizer.h"

#include <algorithm>
#include <cmath>

#include "model/layers.h"

namespace fullband::model {

StatusOr<std::unique_ptr<DistributedOptimizer>> DistributedOptimizer::Create(
    const OptimConfig& optim, bool zero1, Model* model, const Groups& groups) {
  std::unique_ptr<DistributedOptimizer> o(new DistributedOptimizer(zero1, model, groups));
  ops::Backend* backend = &model->backend();
  if (!zero1) {
    FB_ASSIGN_OR_RETURN(o->adamw_, AdamW::Create(optim, model->table(), backend));
    return o;
  }
  o->shard_floats_ = model->params().numel() / groups.dp_device->size();
  o->shard_begin_ = groups.dp_device->rank() * o->shard_floats_;
  FB_ASSIGN_OR_RETURN(
      ops::Arena arena,
      ops::Arena::Create(backend, 2 * static_cast<size_t>(o->shard_floats_) * sizeof(float)));
  o->shard_arena_.emplace(std::move(arena));
  o->grad_shard_ = o->shard_arena_->TakeF32({o->shard_floats_});
  o->param_shard_ = o->shard_arena_->TakeF32({o->shard_floats_});
  FB_ASSIGN_OR_RETURN(o->adamw_, AdamW::Create(optim, model->table(), backend, o->shard_begin_,
                                               o->shard_begin_ + o->shard_floats_));
  return o;
}

StatusOr<OptimizerStats> DistributedOptimizer::Step(int64_t step, int64_t total_steps) {
  if (zero1_) return ShardedStep(step, total_steps);
  if (groups_.tp == nullptr) {
    return adamw_->Step(model_->params(), model_->grads(), step, total_steps);
  }
  // The norm over the TP group's shares (replicated parameters once).
  double squares = GradSquares(model_->grads(), 0);
  FB_RETURN_IF_ERROR(
      groups_.tp->AllReduce(&squares, 1, comm::CommType::kF64, comm::ReduceOp::kSum));
  return adamw_->StepRange(model_->params(), model_->grads(), step, total_steps,
                           std::sqrt(squares));
}

// Note [ZeRO-1]: every rank holds all parameters but the AdamW moments of one shard only, the
// dp-th part [dp_rank·S, (dp_rank + 1)·S) of the (padded) arena. After backward the gradients
// are reduce-scattered (each rank gets the summed gradients of its shard), the global norm is
// the all-reduced sum of the shards' squares, each rank updates its shard, and the parameters
// are all-gathered. Sums combine ranks in the same order as the all-reduce without ZeRO-1.
StatusOr<OptimizerStats> DistributedOptimizer::ShardedStep(int64_t step, int64_t total_steps) {
  ops::Backend& backend = model_->backend();
  const int64_t s = shard_floats_;
  FB_RETURN_IF_ERROR(groups_.dp_device->ReduceScatter(model_->grads().f32(), grad_shard_.f32(), s,
                                                      comm::CommType::kF32, comm::ReduceOp::kSum));
  // Every rank of the world holds another part of the gradients (its TP share, its DP shard).
  double squares = GradSquares(grad_shard_, shard_begin_);
  FB_RETURN_IF_ERROR(
      groups_.world->AllReduce(&squares, 1, comm::CommType::kF64, comm::ReduceOp::kSum));
  const ops::Tensor params =
      ops::Tensor::F32(model_->params().f32() + shard_begin_, {s}, backend.device());
  const OptimizerStats os =
      adamw_->StepRange(params, grad_shard_, step, total_steps, std::sqrt(squares));
  CopyTensor(backend, param_shard_, params);
  FB_RETURN_IF_ERROR(groups_.dp_device->AllGather(param_shard_.f32(), model_->params().f32(), s,
                                                  comm::CommType::kF32));
  return os;
}

// Under tensor parallelism a replicated parameter's gradient is the same on every rank of the
// group, so only TP rank 0 counts it; alone, the whole range at once.
double DistributedOptimizer::GradSquares(ops::Tensor grads, int64_t begin) const {
  ops::Backend& backend = model_->backend();
  if (groups_.tp == nullptr) return backend.SumSquares(grads);
  const ParameterTable& table = model_->table();
  const int64_t end = begin + grads.numel();
  double squares = 0;
  for (const ParamSpec& spec : table.specs()) {
    if (!table.Owns(spec)) continue;
    const int64_t b = std::max(begin, spec.offset), e = std::min(end, spec.offset + spec.numel);
    if (b >= e) continue;
    squares +=
        backend.SumSquares(ops::Tensor::F32(grads.f32() + (b - begin), {e - b}, backend.device()));
  }
  return squares;
}

}  // namespace fullband::model
