#include "model/optimizer.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"

namespace fullband::model {

double LearningRate(const OptimConfig& o, int64_t step, int64_t total_steps) {
  if (o.warmup_steps > 0 && step < o.warmup_steps) {
    return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  }
  const double cooldown = std::floor(o.cooldown_fraction * static_cast<double>(total_steps));
  const double start = static_cast<double>(total_steps) - cooldown;
  if (cooldown > 0 && static_cast<double>(step) >= start) {
    return o.lr * std::max(0.0, (static_cast<double>(total_steps) - step) / cooldown);
  }
  return o.lr;
}

StatusOr<std::unique_ptr<AdamW>> AdamW::Create(const OptimConfig& optim,
                                               const ParameterTable& table, ops::Backend* backend,
                                               int64_t begin, int64_t end) {
  if (end < 0) end = table.total_numel();
  FB_CHECK(0 <= begin && begin <= end) << "moment range [" << begin << ", " << end << ")";
  std::unique_ptr<AdamW> opt(new AdamW(optim, table, backend, begin, end));
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(end - begin, 1)) * sizeof(float);
  FB_ASSIGN_OR_RETURN(ops::Arena m, ops::Arena::Create(backend, bytes));
  FB_ASSIGN_OR_RETURN(ops::Arena v, ops::Arena::Create(backend, bytes));
  opt->m_.emplace(std::move(m));
  opt->v_.emplace(std::move(v));
  opt->m_all_ = opt->m_->TakeF32({end - begin});
  opt->v_all_ = opt->v_->TakeF32({end - begin});
  backend->Zero(opt->m_all_);
  backend->Zero(opt->v_all_);
  return opt;
}

OptimizerStats AdamW::Step(ops::Tensor params, ops::Tensor grads, int64_t step,
                           int64_t total_steps) {
  FB_CHECK(begin_ == 0 && end_ == table_.total_numel()) << "Step needs the whole-table range";
  // The gaps between tensors of the arena are never written, so they add nothing.
  return StepRange(params, grads, step, total_steps, std::sqrt(backend_->SumSquares(grads)));
}

OptimizerStats AdamW::StepRange(ops::Tensor params, ops::Tensor grads, int64_t step,
                                int64_t total_steps, double grad_norm) {
  FB_CHECK_EQ(params.numel(), end_ - begin_);
  FB_CHECK_EQ(grads.numel(), end_ - begin_);
  OptimizerStats stats;
  stats.grad_norm = grad_norm;
  if (optim_.grad_clip > 0 && stats.grad_norm > optim_.grad_clip) {
    stats.clip_scale = optim_.grad_clip / stats.grad_norm;
  }
  stats.lr = LearningRate(optim_, step, total_steps);
  ops::AdamWOptions o;
  o.lr = static_cast<float>(stats.lr);
  o.beta1 = static_cast<float>(optim_.beta1);
  o.beta2 = static_cast<float>(optim_.beta2);
  o.eps = static_cast<float>(optim_.eps);
  o.step = step + 1;
  o.grad_scale = static_cast<float>(stats.clip_scale);
  // Each parameter's part of the range [begin_, end_), at its offset within the range.
  for (const ParamSpec& spec : table_.specs()) {
    const int64_t lo = std::max(spec.offset, begin_);
    const int64_t hi = std::min(spec.offset + spec.numel, end_);
    if (lo >= hi) continue;
    const auto view = [&](const ops::Tensor& t) {
      return ops::Tensor(t.f32() + (lo - begin_), ops::DType::kF32, {hi - lo}, t.device);
    };
    const bool decay = spec.kind == ParamKind::kMatrix ||
                       (spec.kind == ParamKind::kEmbedding && optim_.decay_embedding) ||
                       (spec.kind == ParamKind::kNormGain && optim_.decay_norms);
    o.weight_decay = decay ? static_cast<float>(optim_.weight_decay) : 0.0f;
    backend_->AdamWStep(view(params), view(grads), view(m_all_), view(v_all_), o);
  }
  return stats;
}

}  // namespace fullband::model
