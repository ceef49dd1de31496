#include "proto/config_convert.h"

namespace fullband {
namespace {

// Copies every set field of the message onto `m`. The field lists mirror config.proto.
#define FB_FROM_PROTO(field) \
  if (p.has_##field()) m.field = p.field()

Status UnknownEnum(const char* field, int value) {
  return InvalidArgumentError(std::string(field) + ": unknown enum value " + std::to_string(value));
}

Status ModelFromProto(const proto::ModelConfig& p, ModelConfig& m) {
  FB_FROM_PROTO(vocab_size);
  FB_FROM_PROTO(d_model);
  FB_FROM_PROTO(n_layers);
  FB_FROM_PROTO(n_heads);
  FB_FROM_PROTO(n_kv_heads);
  FB_FROM_PROTO(head_dim);
  FB_FROM_PROTO(ffn_dim);
  FB_FROM_PROTO(max_seq_len);
  FB_FROM_PROTO(rope_theta);
  FB_FROM_PROTO(qk_norm);
  FB_FROM_PROTO(attn_gate);
  FB_FROM_PROTO(window);
  FB_FROM_PROTO(full_attention_every);
  FB_FROM_PROTO(depth_scaling);
  FB_FROM_PROTO(eod_id);
  FB_FROM_PROTO(ignore_id);
  FB_FROM_PROTO(z_loss);
  FB_FROM_PROTO(jitter);
  FB_FROM_PROTO(prefix_mixin);
  FB_FROM_PROTO(pass1_input_norm);
  switch (p.feedback_loss()) {
    case proto::FEEDBACK_LOSS_UNSPECIFIED:
      break;
    case proto::FEEDBACK_LOSS_MEAN:
      m.feedback_loss = FeedbackLoss::kMean;
      break;
    case proto::FEEDBACK_LOSS_SUM:
      m.feedback_loss = FeedbackLoss::kSum;
      break;
    default:
      return UnknownEnum("model.feedback_loss", p.feedback_loss());
  }
  switch (p.feedback_state()) {
    case proto::FEEDBACK_STATE_UNSPECIFIED:
      break;
    case proto::FEEDBACK_STATE_POST_NORM:
      m.feedback_state = FeedbackState::kPostNorm;
      break;
    case proto::FEEDBACK_STATE_PRE_NORM:
      m.feedback_state = FeedbackState::kPreNorm;
      break;
    default:
      return UnknownEnum("model.feedback_state", p.feedback_state());
  }
  return OkStatus();
}

void ParallelFromProto(const proto::ParallelConfig& p, ParallelConfig& m) {
  FB_FROM_PROTO(tp);
  FB_FROM_PROTO(dp);
  FB_FROM_PROTO(zero1);
}

void DataFromProto(const proto::DataConfig& p, DataConfig& m) {
  FB_FROM_PROTO(path);
  if (p.sources_size() > 0) {
    m.sources.clear();
    for (const proto::DataSource& s : p.sources()) {
      DataSource source;
      source.store = s.store();
      if (s.has_weight()) source.weight = s.weight();
      m.sources.push_back(std::move(source));
    }
  }
  FB_FROM_PROTO(prefetch);
  FB_FROM_PROTO(batch_size);
  FB_FROM_PROTO(seq_len);
  FB_FROM_PROTO(seed);
}

void OptimFromProto(const proto::OptimConfig& p, OptimConfig& m) {
  FB_FROM_PROTO(lr);
  FB_FROM_PROTO(beta1);
  FB_FROM_PROTO(beta2);
  FB_FROM_PROTO(eps);
  FB_FROM_PROTO(weight_decay);
  FB_FROM_PROTO(decay_embedding);
  FB_FROM_PROTO(decay_norms);
  FB_FROM_PROTO(grad_clip);
  FB_FROM_PROTO(warmup_steps);
  FB_FROM_PROTO(cooldown_fraction);
}

void ScheduleFromProto(const proto::ScheduleConfig& p, ScheduleConfig& m) {
  FB_FROM_PROTO(steps);
  FB_FROM_PROTO(seed);
  if (p.phases_size() > 0) {
    m.phases.clear();
    for (const proto::SchedulePhase& ph : p.phases()) {
      SchedulePhase phase;
      phase.until = ph.until();
      phase.mix.clear();
      for (const proto::PassProbability& pp : ph.mix()) {
        phase.mix.emplace_back(pp.passes(), pp.probability());
      }
      m.phases.push_back(std::move(phase));
    }
  }
}

void CheckpointFromProto(const proto::CheckpointConfig& p, CheckpointConfig& m) {
  FB_FROM_PROTO(dir);
  FB_FROM_PROTO(every_steps);
  FB_FROM_PROTO(keep);
}

Status BudgetFromProto(const proto::BudgetConfig& p, BudgetConfig& m) {
  FB_FROM_PROTO(amount);
  switch (p.kind()) {
    case proto::BUDGET_KIND_UNSPECIFIED:
      break;
    case proto::BUDGET_KIND_TOKENS:
      m.kind = BudgetKind::kTokens;
      break;
    case proto::BUDGET_KIND_TOKEN_EQUIVALENTS:
      m.kind = BudgetKind::kTokenEquivalents;
      break;
    case proto::BUDGET_KIND_FLOPS:
      m.kind = BudgetKind::kFlops;
      break;
    default:
      return UnknownEnum("budget.kind", p.kind());
  }
  return OkStatus();
}

Status LauncherFromProto(const proto::LauncherConfig& p, LauncherConfig& m) {
  FB_FROM_PROTO(processes);
  if (p.command_size() > 0) m.command.assign(p.command().begin(), p.command().end());
  m.extra_args.assign(p.extra_args().begin(), p.extra_args().end());
  FB_FROM_PROTO(max_restarts);
  FB_FROM_PROTO(backoff_seconds);
  FB_FROM_PROTO(max_backoff_seconds);
  switch (p.kind()) {
    case proto::LAUNCHER_KIND_UNSPECIFIED:
      break;
    case proto::LAUNCHER_KIND_LOCAL:
      m.kind = LauncherKind::kLocal;
      break;
    case proto::LAUNCHER_KIND_SLURM:
      m.kind = LauncherKind::kSlurm;
      break;
    default:
      return UnknownEnum("launcher.kind", p.kind());
  }
  return OkStatus();
}

Status RuntimeFromProto(const proto::RuntimeConfig& p, RuntimeConfig& m) {
  FB_FROM_PROTO(device);
  FB_FROM_PROTO(threads);
  FB_FROM_PROTO(log_every);
  FB_FROM_PROTO(init_seed);
  FB_FROM_PROTO(init_from);
  FB_FROM_PROTO(save_to);
  FB_FROM_PROTO(peak_gflops);
  switch (p.recompute()) {
    case proto::RECOMPUTE_UNSPECIFIED:
      break;
    case proto::RECOMPUTE_NONE:
      m.recompute = Recompute::kNone;
      break;
    case proto::RECOMPUTE_SELECTIVE:
      m.recompute = Recompute::kSelective;
      break;
    case proto::RECOMPUTE_FULL:
      m.recompute = Recompute::kFull;
      break;
    default:
      return UnknownEnum("runtime.recompute", p.recompute());
  }
  return OkStatus();
}

#undef FB_FROM_PROTO

void ModelToProto(const ModelConfig& m, proto::ModelConfig* p) {
  p->set_vocab_size(m.vocab_size);
  p->set_d_model(m.d_model);
  p->set_n_layers(m.n_layers);
  p->set_n_heads(m.n_heads);
  p->set_n_kv_heads(m.n_kv_heads);
  p->set_head_dim(m.head_dim);
  p->set_ffn_dim(m.ffn_dim);
  p->set_max_seq_len(m.max_seq_len);
  p->set_rope_theta(m.rope_theta);
  p->set_qk_norm(m.qk_norm);
  p->set_attn_gate(m.attn_gate);
  p->set_window(m.window);
  p->set_full_attention_every(m.full_attention_every);
  p->set_depth_scaling(m.depth_scaling);
  p->set_eod_id(m.eod_id);
  p->set_ignore_id(m.ignore_id);
  p->set_z_loss(m.z_loss);
  p->set_feedback_loss(m.feedback_loss == FeedbackLoss::kMean ? proto::FEEDBACK_LOSS_MEAN
                                                              : proto::FEEDBACK_LOSS_SUM);
  p->set_feedback_state(m.feedback_state == FeedbackState::kPostNorm
                            ? proto::FEEDBACK_STATE_POST_NORM
                            : proto::FEEDBACK_STATE_PRE_NORM);
  p->set_jitter(m.jitter);
  p->set_prefix_mixin(m.prefix_mixin);
  p->set_pass1_input_norm(m.pass1_input_norm);
}

void DataToProto(const DataConfig& m, proto::DataConfig* p) {
  p->set_path(m.path);
  for (const DataSource& s : m.sources) {
    proto::DataSource* out = p->add_sources();
    out->set_store(s.store);
    out->set_weight(s.weight);
  }
  p->set_prefetch(m.prefetch);
  p->set_batch_size(m.batch_size);
  p->set_seq_len(m.seq_len);
  p->set_seed(m.seed);
}

void OptimToProto(const OptimConfig& m, proto::OptimConfig* p) {
  p->set_lr(m.lr);
  p->set_beta1(m.beta1);
  p->set_beta2(m.beta2);
  p->set_eps(m.eps);
  p->set_weight_decay(m.weight_decay);
  p->set_decay_embedding(m.decay_embedding);
  p->set_decay_norms(m.decay_norms);
  p->set_grad_clip(m.grad_clip);
  p->set_warmup_steps(m.warmup_steps);
  p->set_cooldown_fraction(m.cooldown_fraction);
}

void ScheduleToProto(const ScheduleConfig& m, proto::ScheduleConfig* p) {
  p->set_steps(m.steps);
  p->set_seed(m.seed);
  for (const SchedulePhase& phase : m.phases) {
    proto::SchedulePhase* out = p->add_phases();
    out->set_until(phase.until);
    for (const auto& [passes, prob] : phase.mix) {
      proto::PassProbability* pp = out->add_mix();
      pp->set_passes(passes);
      pp->set_probability(prob);
    }
  }
}

proto::BudgetKind BudgetKindToProto(BudgetKind k) {
  switch (k) {
    case BudgetKind::kTokens:
      return proto::BUDGET_KIND_TOKENS;
    case BudgetKind::kTokenEquivalents:
      return proto::BUDGET_KIND_TOKEN_EQUIVALENTS;
    case BudgetKind::kFlops:
      return proto::BUDGET_KIND_FLOPS;
  }
  return proto::BUDGET_KIND_UNSPECIFIED;
}

proto::Recompute RecomputeToProto(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return proto::RECOMPUTE_NONE;
    case Recompute::kSelective:
      return proto::RECOMPUTE_SELECTIVE;
    case Recompute::kFull:
      return proto::RECOMPUTE_FULL;
  }
  return proto::RECOMPUTE_UNSPECIFIED;
}

void LauncherToProto(const LauncherConfig& m, proto::LauncherConfig* p) {
  p->set_kind(m.kind == LauncherKind::kLocal ? proto::LAUNCHER_KIND_LOCAL
                                             : proto::LAUNCHER_KIND_SLURM);
  p->set_processes(m.processes);
  for (const std::string& c : m.command) p->add_command(c);
  for (const std::string& a : m.extra_args) p->add_extra_args(a);
  p->set_max_restarts(m.max_restarts);
  p->set_backoff_seconds(m.backoff_seconds);
  p->set_max_backoff_seconds(m.max_backoff_seconds);
}

void RuntimeToProto(const RuntimeConfig& m, proto::RuntimeConfig* p) {
  p->set_device(m.device);
  p->set_threads(m.threads);
  p->set_recompute(RecomputeToProto(m.recompute));
  p->set_log_every(m.log_every);
  p->set_init_seed(m.init_seed);
  p->set_init_from(m.init_from);
  p->set_save_to(m.save_to);
  p->set_peak_gflops(m.peak_gflops);
}

}  // namespace

proto::Config ToProto(const Config& config) {
  proto::Config out;
  ModelToProto(config.model, out.mutable_model());
  out.mutable_parallel()->set_tp(config.parallel.tp);
  out.mutable_parallel()->set_dp(config.parallel.dp);
  out.mutable_parallel()->set_zero1(config.parallel.zero1);
  DataToProto(config.data, out.mutable_data());
  OptimToProto(config.optim, out.mutable_optim());
  ScheduleToProto(config.schedule, out.mutable_schedule());
  out.mutable_checkpoint()->set_dir(config.checkpoint.dir);
  out.mutable_checkpoint()->set_every_steps(config.checkpoint.every_steps);
  out.mutable_checkpoint()->set_keep(config.checkpoint.keep);
  out.mutable_budget()->set_kind(BudgetKindToProto(config.budget.kind));
  out.mutable_budget()->set_amount(config.budget.amount);
  LauncherToProto(config.launcher, out.mutable_launcher());
  RuntimeToProto(config.runtime, out.mutable_runtime());
  return out;
}

StatusOr<Config> FromProto(const proto::Config& message) {
  Config config;
  FB_RETURN_IF_ERROR(ModelFromProto(message.model(), config.model));
  ParallelFromProto(message.parallel(), config.parallel);
  DataFromProto(message.data(), config.data);
  OptimFromProto(message.optim(), config.optim);
  ScheduleFromProto(message.schedule(), config.schedule);
  CheckpointFromProto(message.checkpoint(), config.checkpoint);
  FB_RETURN_IF_ERROR(BudgetFromProto(message.budget(), config.budget));
  FB_RETURN_IF_ERROR(LauncherFromProto(message.launcher(), config.launcher));
  FB_RETURN_IF_ERROR(RuntimeFromProto(message.runtime(), config.runtime));
  FB_RETURN_IF_ERROR(config.Validate());
  return config;
}

}  // namespace fullband
