// The one list of the Config's fields (common/config.h): their names, their order, and the
// names of every enum's values. The YAML reader and writer (common/config.cc) and the proto
// conversion (proto/config_convert.cc, by reflection on config.proto's field names) walk these
// lists; a field added to a struct but not here fails ConfigFieldsTest, and one missing from
// config.proto fails the conversion's round-trip test.
//
//   VisitFields(config.model, [](const char* name, auto& field) { ... });
//
// calls `visit(name, field)` for every field of a struct, in file order (common/visit_fields.h);
// the field is const when the struct is. A field whose type has VisitFields of its own (a
// section, a list entry) is a mapping; the caller recurses.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>

#include "common/config.h"
#include "common/visit_fields.h"

namespace fullband {

// The names of each enum's values, as YAML, the *Name functions and errors spell them.
template <typename E, size_t N>
using NameTable = std::array<std::pair<E, std::string_view>, N>;

inline constexpr NameTable<FeedbackLoss, 2> kFeedbackLossNames{
    {{FeedbackLoss::kMean, "mean"}, {FeedbackLoss::kSum, "sum"}}};
inline constexpr NameTable<FeedbackState, 2> kFeedbackStateNames{
    {{FeedbackState::kPostNorm, "post_norm"}, {FeedbackState::kPreNorm, "pre_norm"}}};
inline constexpr NameTable<Recompute, 3> kRecomputeNames{
    {{Recompute::kNone, "none"}, {Recompute::kSelective, "selective"}, {Recompute::kFull, "full"}}};
inline constexpr NameTable<BudgetKind, 3> kBudgetKindNames{
    {{BudgetKind::kTokens, "tokens"},
     {BudgetKind::kTokenEquivalents, "token_equivalents"},
     {BudgetKind::kFlops, "flops"}}};
inline constexpr NameTable<LauncherKind, 2> kLauncherKindNames{
    {{LauncherKind::kLocal, "local"}, {LauncherKind::kSlurm, "slurm"}}};

constexpr const auto& EnumNames(FeedbackLoss) { return kFeedbackLossNames; }
constexpr const auto& EnumNames(FeedbackState) { return kFeedbackStateNames; }
constexpr const auto& EnumNames(Recompute) { return kRecomputeNames; }
constexpr const auto& EnumNames(BudgetKind) { return kBudgetKindNames; }
constexpr const auto& EnumNames(LauncherKind) { return kLauncherKindNames; }

template <typename E>
constexpr std::string_view NameOf(E v) {
  for (const auto& [value, name] : EnumNames(v)) {
    if (value == v) return name;
  }
  return "?";
}

template <FieldsOf<ModelConfig> M, typename Visitor>
void VisitFields(M& m, Visitor&& visit) {
  visit("vocab_size", m.vocab_size);
  visit("d_model", m.d_model);
  visit("n_layers", m.n_layers);
  visit("n_heads", m.n_heads);
  visit("n_kv_heads", m.n_kv_heads);
  visit("head_dim", m.head_dim);
  visit("ffn_dim", m.ffn_dim);
  visit("max_seq_len", m.max_seq_len);
  visit("rope_theta", m.rope_theta);
  visit("qk_norm", m.qk_norm);
  visit("attn_gate", m.attn_gate);
  visit("window", m.window);
  visit("full_attention_every", m.full_attention_every);
  visit("depth_scaling", m.depth_scaling);
  visit("eod_id", m.eod_id);
  visit("ignore_id", m.ignore_id);
  visit("z_loss", m.z_loss);
  visit("feedback_loss", m.feedback_loss);
  visit("feedback_state", m.feedback_state);
  visit("jitter", m.jitter);
  visit("prefix_mixin", m.prefix_mixin);
  visit("pass1_input_norm", m.pass1_input_norm);
}

template <FieldsOf<ParallelConfig> M, typename Visitor>
void VisitFields(M& p, Visitor&& visit) {
  visit("tp", p.tp);
  visit("dp", p.dp);
  visit("zero1", p.zero1);
}

template <FieldsOf<DataSource> M, typename Visitor>
void VisitFields(M& s, Visitor&& visit) {
  visit("store", s.store);
  visit("weight", s.weight);
}

template <FieldsOf<DataConfig> M, typename Visitor>
void VisitFields(M& d, Visitor&& visit) {
  visit("path", d.path);
  visit("sources", d.sources);
  visit("prefetch", d.prefetch);
  visit("batch_size", d.batch_size);
  visit("seq_len", d.seq_len);
  visit("seed", d.seed);
}

template <FieldsOf<OptimConfig> M, typename Visitor>
void VisitFields(M& o, Visitor&& visit) {
  visit("lr", o.lr);
  visit("beta1", o.beta1);
  visit("beta2", o.beta2);
  visit("eps", o.eps);
  visit("weight_decay", o.weight_decay);
  visit("decay_embedding", o.decay_embedding);
  visit("decay_norms", o.decay_norms);
  visit("grad_clip", o.grad_clip);
  visit("warmup_steps", o.warmup_steps);
  visit("cooldown_fraction", o.cooldown_fraction);
}

// `mix` is a list of (passes, probability) pairs: a YAML mapping {passes: probability}, a list
// of config.proto's PassProbability on the wire.
template <FieldsOf<SchedulePhase> M, typename Visitor>
void VisitFields(M& p, Visitor&& visit) {
  visit("until", p.until);
  visit("mix", p.mix);
}

template <FieldsOf<ScheduleConfig> M, typename Visitor>
void VisitFields(M& s, Visitor&& visit) {
  visit("steps", s.steps);
  visit("seed", s.seed);
  visit("phases", s.phases);
}

template <FieldsOf<CheckpointConfig> M, typename Visitor>
void VisitFields(M& k, Visitor&& visit) {
  visit("dir", k.dir);
  visit("every_steps", k.every_steps);
  visit("keep", k.keep);
}

template <FieldsOf<BudgetConfig> M, typename Visitor>
void VisitFields(M& b, Visitor&& visit) {
  visit("kind", b.kind);
  visit("amount", b.amount);
}

template <FieldsOf<SlurmConfig> M, typename Visitor>
void VisitFields(M& s, Visitor&& visit) {
  visit("partition", s.partition);
  visit("nodes", s.nodes);
  visit("tasks_per_node", s.tasks_per_node);
  visit("cpus_per_task", s.cpus_per_task);
  visit("gpus_per_node", s.gpus_per_node);
  visit("time_limit", s.time_limit);
  visit("account", s.account);
  visit("qos", s.qos);
  visit("sbatch_args", s.sbatch_args);
  visit("srun_args", s.srun_args);
  visit("log_dir", s.log_dir);
  visit("pending_timeout_seconds", s.pending_timeout_seconds);
}

template <FieldsOf<LauncherConfig> M, typename Visitor>
void VisitFields(M& l, Visitor&& visit) {
  visit("kind", l.kind);
  visit("processes", l.processes);
  visit("command", l.command);
  visit("extra_args", l.extra_args);
  visit("max_restarts", l.max_restarts);
  visit("backoff_seconds", l.backoff_seconds);
  visit("max_backoff_seconds", l.max_backoff_seconds);
  visit("slurm", l.slurm);
}

template <FieldsOf<RuntimeConfig> M, typename Visitor>
void VisitFields(M& r, Visitor&& visit) {
  visit("device", r.device);
  visit("threads", r.threads);
  visit("recompute", r.recompute);
  visit("log_every", r.log_every);
  visit("init_seed", r.init_seed);
  visit("init_from", r.init_from);
  visit("save_to", r.save_to);
  visit("peak_gflops", r.peak_gflops);
}

// The sections, in file order.
template <FieldsOf<Config> M, typename Visitor>
void VisitFields(M& c, Visitor&& visit) {
  visit("model", c.model);
  visit("parallel", c.parallel);
  visit("data", c.data);
  visit("optim", c.optim);
  visit("schedule", c.schedule);
  visit("checkpoint", c.checkpoint);
  visit("budget", c.budget);
  visit("launcher", c.launcher);
  visit("runtime", c.runtime);
}

// The fields a list entry must give (the rest keep their defaults).
constexpr std::array<std::string_view, 1> RequiredFields(const DataSource&) { return {"store"}; }
constexpr std::array<std::string_view, 2> RequiredFields(const SchedulePhase&) {
  return {"until", "mix"};
}

}  // namespace fullband
