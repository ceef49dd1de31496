#include "worker/optimizer.h"

#include <algorithm>
#include <cmath>

namespace fullband::worker {

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
                                               const ParameterTable& table, ops::Backend* backend) {
  std::unique_ptr<AdamW> opt(new AdamW(optim, table, backend));
  const size_t bytes = static_cast<size_t>(table.total_numel()) * sizeof(float);
  FB_ASSIGN_OR_RETURN(ops::Arena m, ops::Arena::Create(backend, bytes));
  FB_ASSIGN_OR_RETURN(ops::Arena v, ops::Arena::Create(backend, bytes));
  opt->m_.emplace(std::move(m));
  opt->v_.emplace(std::move(v));
  opt->m_all_ = opt->m_->TakeF32({table.total_numel()});
  opt->v_all_ = opt->v_->TakeF32({table.total_numel()});
  backend->Zero(opt->m_all_);
  backend->Zero(opt->v_all_);
  return opt;
}

OptimizerStats AdamW::Step(ops::Tensor params, ops::Tensor grads, int64_t step,
                           int64_t total_steps) {
  OptimizerStats stats;
  // The gaps between tensors of the arena are never written, so they add nothing.
  stats.grad_norm = std::sqrt(backend_->SumSquares(grads));
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
  const auto view = [](const ops::Tensor& all, const ParamSpec& spec) {
    return ops::Tensor(all.f32() + spec.offset, ops::DType::kF32, {spec.numel}, all.device);
  };
  for (const ParamSpec& spec : table_.specs()) {
    const bool decay = spec.kind == ParamKind::kMatrix ||
                       (spec.kind == ParamKind::kEmbedding && optim_.decay_embedding) ||
                       (spec.kind == ParamKind::kNormGain && optim_.decay_norms);
    o.weight_decay = decay ? static_cast<float>(optim_.weight_decay) : 0.0f;
    backend_->AdamWStep(view(params, spec), view(grads, spec), view(m_all_, spec),
                        view(v_all_, spec), o);
  }
  return stats;
}

}  // namespace fullband::worker
