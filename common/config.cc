#include "common/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <set>
#include <sstream>

#include "common/file_util.h"
#include "common/yaml_util.h"

namespace fullband {
namespace {

// The one table of names per enum field: YAML reads and writes them, the *Name functions
// return them, and a bad value's error lists them.
template <typename E, size_t N>
using NameTable = std::array<std::pair<E, std::string_view>, N>;

constexpr NameTable<FeedbackLoss, 2> kFeedbackLossNames{
    {{FeedbackLoss::kMean, "mean"}, {FeedbackLoss::kSum, "sum"}}};
constexpr NameTable<FeedbackState, 2> kFeedbackStateNames{
    {{FeedbackState::kPostNorm, "post_norm"}, {FeedbackState::kPreNorm, "pre_norm"}}};
constexpr NameTable<Recompute, 3> kRecomputeNames{
    {{Recompute::kNone, "none"}, {Recompute::kSelective, "selective"}, {Recompute::kFull, "full"}}};
constexpr NameTable<BudgetKind, 3> kBudgetKindNames{
    {{BudgetKind::kTokens, "tokens"},
     {BudgetKind::kTokenEquivalents, "token_equivalents"},
     {BudgetKind::kFlops, "flops"}}};
constexpr NameTable<LauncherKind, 2> kLauncherKindNames{
    {{LauncherKind::kLocal, "local"}, {LauncherKind::kSlurm, "slurm"}}};

constexpr const auto& EnumNames(FeedbackLoss) { return kFeedbackLossNames; }
constexpr const auto& EnumNames(FeedbackState) { return kFeedbackStateNames; }
constexpr const auto& EnumNames(Recompute) { return kRecomputeNames; }
constexpr const auto& EnumNames(BudgetKind) { return kBudgetKindNames; }
constexpr const auto& EnumNames(LauncherKind) { return kLauncherKindNames; }

template <typename E>
std::string_view NameOf(E v) {
  for (const auto& [value, name] : EnumNames(v)) {
    if (value == v) return name;
  }
  return "?";
}

// The one table of model fields: every load, dump and comparison walks it.
template <typename M, typename Visitor>
void VisitModelFields(M& m, Visitor&& visit) {
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

template <typename D, typename Visitor>
void VisitDataFields(D& d, Visitor&& visit) {
  visit("path", d.path);
  visit("sources", d.sources);
  visit("prefetch", d.prefetch);
  visit("batch_size", d.batch_size);
  visit("seq_len", d.seq_len);
  visit("seed", d.seed);
}

template <typename O, typename Visitor>
void VisitOptimFields(O& o, Visitor&& visit) {
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

template <typename S, typename Visitor>
void VisitScheduleFields(S& s, Visitor&& visit) {
  visit("steps", s.steps);
  visit("seed", s.seed);
  visit("phases", s.phases);
}

template <typename R, typename Visitor>
void VisitRuntimeFields(R& r, Visitor&& visit) {
  visit("device", r.device);
  visit("threads", r.threads);
  visit("recompute", r.recompute);
  visit("log_every", r.log_every);
  visit("init_seed", r.init_seed);
  visit("init_from", r.init_from);
  visit("save_to", r.save_to);
  visit("peak_gflops", r.peak_gflops);
}

template <typename P, typename Visitor>
void VisitParallelFields(P& p, Visitor&& visit) {
  visit("tp", p.tp);
  visit("dp", p.dp);
  visit("zero1", p.zero1);
}

template <typename K, typename Visitor>
void VisitCheckpointFields(K& k, Visitor&& visit) {
  visit("dir", k.dir);
  visit("every_steps", k.every_steps);
  visit("keep", k.keep);
}

template <typename B, typename Visitor>
void VisitBudgetFields(B& b, Visitor&& visit) {
  visit("kind", b.kind);
  visit("amount", b.amount);
}

template <typename L, typename Visitor>
void VisitLauncherFields(L& l, Visitor&& visit) {
  visit("kind", l.kind);
  visit("processes", l.processes);
  visit("command", l.command);
  visit("extra_args", l.extra_args);
  visit("max_restarts", l.max_restarts);
  visit("backoff_seconds", l.backoff_seconds);
  visit("max_backoff_seconds", l.max_backoff_seconds);
}

// Calls visit(section name, section struct, field visitor) for every section, in file order.
template <typename C, typename Visitor>
void VisitSections(C& c, Visitor&& visit) {
  visit("model", c.model, [](auto& m, auto&& v) { VisitModelFields(m, v); });
  visit("parallel", c.parallel, [](auto& m, auto&& v) { VisitParallelFields(m, v); });
  visit("data", c.data, [](auto& m, auto&& v) { VisitDataFields(m, v); });
  visit("optim", c.optim, [](auto& m, auto&& v) { VisitOptimFields(m, v); });
  visit("schedule", c.schedule, [](auto& m, auto&& v) { VisitScheduleFields(m, v); });
  visit("checkpoint", c.checkpoint, [](auto& m, auto&& v) { VisitCheckpointFields(m, v); });
  visit("budget", c.budget, [](auto& m, auto&& v) { VisitBudgetFields(m, v); });
  visit("launcher", c.launcher, [](auto& m, auto&& v) { VisitLauncherFields(m, v); });
  visit("runtime", c.runtime, [](auto& m, auto&& v) { VisitRuntimeFields(m, v); });
}

std::string Describe(const YAML::Node& node) {
  if (node.IsScalar()) return "'" + Excerpt(node.Scalar()) + "'";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "null";
}

std::string Where(std::string_view source, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  std::string out(source);
  if (mark.line >= 0) out += ":" + std::to_string(mark.line + 1);
  return out;
}

// Reads one scalar into a field, with an error naming "<source>:<line>: <path>".
class FieldReader {
 public:
  FieldReader(std::string_view source, std::string prefix, const YAML::Node& map)
      : source_(source), prefix_(std::move(prefix)), map_(map) {}

  template <typename T>
  void operator()(const char* name, T& field) {
    seen_.insert(name);
    if (!status_.ok()) return;
    const YAML::Node node = map_[name];
    if (!node) return;  // keeps the default
    status_ = Read(node, prefix_ + name, field);
  }

  Status Finish() {
    if (!status_.ok()) return status_;
    for (const auto& kv : map_) {
      const std::string key = kv.first.as<std::string>();
      if (!seen_.count(key)) {
        return InvalidArgumentError(Where(source_, kv.first) + ": unknown field " + prefix_ + key);
      }
    }
    return OkStatus();
  }

 private:
  // A list entry that is a mapping: only `keys` may appear, and `required` must.
  Status CheckEntry(const YAML::Node& entry, const std::string& here,
                    std::initializer_list<std::string_view> keys, std::string_view required) {
    for (const auto& kv : entry) {
      const std::string key = kv.first.as<std::string>();
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
        return InvalidArgumentError(Where(source_, kv.first) + ": unknown field " + here + "." +
                                    key);
      }
    }
    if (!entry[std::string(required)]) {
      return InvalidArgumentError(Where(source_, entry) + ": " + here + "." +
                                  std::string(required) + " is required");
    }
    return OkStatus();
  }
  Status Error(const YAML::Node& node, const std::string& path, const std::string& what) {
    return InvalidArgumentError(Where(source_, node) + ": " + path + ": expected " + what +
                                ", got " + Describe(node));
  }
  Status Read(const YAML::Node& node, const std::string& path, int64_t& out) {
    if (!node.IsScalar()) return Error(node, path, "an integer");
    std::istringstream in(node.Scalar());
    int64_t v;
    if (!(in >> v) || !in.eof()) return Error(node, path, "an integer");
    out = v;
    return OkStatus();
  }
  Status Read(const YAML::Node& node, const std::string& path, double& out) {
    if (!node.IsScalar()) return Error(node, path, "a number");
    std::istringstream in(node.Scalar());
    double v;
    if (!(in >> v) || !in.eof() || !std::isfinite(v)) return Error(node, path, "a number");
    out = v;
    return OkStatus();
  }
  Status Read(const YAML::Node& node, const std::string& path, bool& out) {
    if (!node.IsScalar()) return Error(node, path, "true or false");
    const std::string& s = node.Scalar();
    if (s == "true") {
      out = true;
    } else if (s == "false") {
      out = false;
    } else {
      return Error(node, path, "true or false");
    }
    return OkStatus();
  }
  // Every enum field: its name in the enum's table (EnumNames below).
  template <typename E>
  requires std::is_enum_v<E> Status Read(const YAML::Node& node, const std::string& path, E& out) {
    const std::string v = node.IsScalar() ? node.Scalar() : "";
    std::string choices;
    for (const auto& [value, name] : EnumNames(E{})) {
      if (v == name) {
        out = value;
        return OkStatus();
      }
      choices += (choices.empty() ? "" : ", ") + std::string(name);
    }
    return Error(node, path, "one of " + choices);
  }
  Status Read(const YAML::Node& node, const std::string& path, std::string& out) {
    if (!node.IsScalar()) return Error(node, path, "a string");
    out = node.Scalar();
    return OkStatus();
  }
  // phases: [{until: 0.75, mix: {1: 1.0}}, ...]
  Status Read(const YAML::Node& node, const std::string& path, std::vector<SchedulePhase>& out) {
    if (!node.IsSequence() || node.size() == 0) return Error(node, path, "a non-empty list");
    std::vector<SchedulePhase> phases;
    for (size_t i = 0; i < node.size(); ++i) {
      const YAML::Node ph = node[i];
      const std::string here = path + "[" + std::to_string(i) + "]";
      if (!ph.IsMap()) return Error(ph, here, "a mapping {until, mix}");
      SchedulePhase phase;
      FB_RETURN_IF_ERROR(CheckEntry(ph, here, {"until", "mix"}, "until"));
      FB_RETURN_IF_ERROR(Read(ph["until"], here + ".until", phase.until));
      const YAML::Node mix = ph["mix"];
      if (!mix || !mix.IsMap() || mix.size() == 0) {
        return Error(mix ? mix : ph, here + ".mix", "a mapping {passes: probability}");
      }
      phase.mix.clear();
      for (const auto& kv : mix) {
        int64_t passes;
        double prob;
        FB_RETURN_IF_ERROR(Read(kv.first, here + ".mix key", passes));
        FB_RETURN_IF_ERROR(Read(kv.second, here + ".mix[" + kv.first.Scalar() + "]", prob));
        phase.mix.emplace_back(passes, prob);
      }
      phases.push_back(std::move(phase));
    }
    out = std::move(phases);
    return OkStatus();
  }
  // sources: [{store: PATH, weight: 0.7}, ...]
  Status Read(const YAML::Node& node, const std::string& path, std::vector<DataSource>& out) {
    if (!node.IsSequence()) return Error(node, path, "a list of {store, weight}");
    std::vector<DataSource> sources;
    for (size_t i = 0; i < node.size(); ++i) {
      const YAML::Node src = node[i];
      const std::string here = path + "[" + std::to_string(i) + "]";
      if (!src.IsMap()) return Error(src, here, "a mapping {store, weight}");
      FB_RETURN_IF_ERROR(CheckEntry(src, here, {"store", "weight"}, "store"));
      DataSource s;
      FB_RETURN_IF_ERROR(Read(src["store"], here + ".store", s.store));
      if (src["weight"]) FB_RETURN_IF_ERROR(Read(src["weight"], here + ".weight", s.weight));
      sources.push_back(std::move(s));
    }
    out = std::move(sources);
    return OkStatus();
  }
  // command: [fullband, worker]
  Status Read(const YAML::Node& node, const std::string& path, std::vector<std::string>& out) {
    if (!node.IsSequence()) return Error(node, path, "a list of strings");
    std::vector<std::string> items;
    for (size_t i = 0; i < node.size(); ++i) {
      std::string item;
      FB_RETURN_IF_ERROR(Read(node[i], path + "[" + std::to_string(i) + "]", item));
      items.push_back(std::move(item));
    }
    out = std::move(items);
    return OkStatus();
  }

  std::string_view source_;
  std::string prefix_;
  const YAML::Node& map_;
  std::set<std::string> seen_;
  Status status_;
};

struct FieldWriter {
  YAML::Emitter& out;
  template <typename T>
  void operator()(const char* name, const T& value) {
    out << YAML::Key << name << YAML::Value;
    if constexpr (std::is_enum_v<T>) {
      out << std::string(NameOf(value));
    } else if constexpr (std::is_same_v<T, std::vector<SchedulePhase>>) {
      out << YAML::BeginSeq;
      for (const SchedulePhase& p : value) {
        out << YAML::Flow << YAML::BeginMap << YAML::Key << "until" << YAML::Value
            << YAML::Precision(17) << p.until << YAML::Key << "mix" << YAML::Value
            << YAML::BeginMap;
        for (const auto& [passes, prob] : p.mix) {
          out << YAML::Key << passes << YAML::Value << YAML::Precision(17) << prob;
        }
        out << YAML::EndMap << YAML::EndMap;
      }
      out << YAML::EndSeq;
    } else if constexpr (std::is_same_v<T, std::vector<DataSource>>) {
      out << YAML::BeginSeq;
      for (const DataSource& s : value) {
        out << YAML::Flow << YAML::BeginMap << YAML::Key << "store" << YAML::Value << s.store
            << YAML::Key << "weight" << YAML::Value << YAML::Precision(17) << s.weight
            << YAML::EndMap;
      }
      out << YAML::EndSeq;
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      out << YAML::Flow << YAML::BeginSeq;
      for (const std::string& item : value) out << YAML::DoubleQuoted << item;
      out << YAML::EndSeq;
    } else if constexpr (std::is_same_v<T, double>) {
      out << YAML::Precision(17) << value;
    } else {
      out << value;
    }
  }
};

Status Field(const char* name, const std::string& why) {
  return InvalidArgumentError(std::string("model.") + name + ": " + why);
}

}  // namespace

std::string_view FeedbackLossName(FeedbackLoss v) { return NameOf(v); }
std::string_view FeedbackStateName(FeedbackState v) { return NameOf(v); }
std::string_view RecomputeName(Recompute v) { return NameOf(v); }
std::string_view BudgetKindName(BudgetKind v) { return NameOf(v); }
std::string_view LauncherKindName(LauncherKind v) { return NameOf(v); }

Status ModelConfig::Validate() const {
  const auto positive = [](const char* name, int64_t v) -> Status {
    if (v <= 0) return Field(name, std::to_string(v) + " must be positive");
    return OkStatus();
  };
  FB_RETURN_IF_ERROR(positive("vocab_size", vocab_size));
  FB_RETURN_IF_ERROR(positive("d_model", d_model));
  FB_RETURN_IF_ERROR(positive("n_layers", n_layers));
  FB_RETURN_IF_ERROR(positive("n_heads", n_heads));
  FB_RETURN_IF_ERROR(positive("n_kv_heads", n_kv_heads));
  FB_RETURN_IF_ERROR(positive("head_dim", head_dim));
  FB_RETURN_IF_ERROR(positive("ffn_dim", ffn_dim));
  FB_RETURN_IF_ERROR(positive("max_seq_len", max_seq_len));
  if (n_heads % n_kv_heads != 0) {
    return Field("n_heads", std::to_string(n_heads) + " is not divisible by model.n_kv_heads = " +
                                std::to_string(n_kv_heads));
  }
  if (head_dim % 2 != 0) {
    return Field("head_dim", std::to_string(head_dim) + " must be even (RoPE rotates pairs)");
  }
  if (!(rope_theta > 0)) return Field("rope_theta", std::to_string(rope_theta) + " must be > 0");
  if (window < 0) return Field("window", std::to_string(window) + " must be >= 0 (0: no window)");
  if (full_attention_every < 0) {
    return Field("full_attention_every",
                 std::to_string(full_attention_every) + " must be >= 0 (0: never)");
  }
  if (eod_id < 0 || eod_id >= vocab_size) {
    return Field("eod_id", std::to_string(eod_id) + " is outside the vocabulary [0, " +
                               std::to_string(vocab_size) + ")");
  }
  if (ignore_id >= 0 && ignore_id < vocab_size) {
    return Field("ignore_id",
                 std::to_string(ignore_id) + " is a token id; it must lie outside [0, vocab_size)");
  }
  if (!(z_loss >= 0)) return Field("z_loss", std::to_string(z_loss) + " must be >= 0");
  if (!(jitter >= 0)) return Field("jitter", std::to_string(jitter) + " must be >= 0");
  return OkStatus();
}

bool ModelConfig::IsFullAttentionLayer(int64_t layer) const {
  if (window == 0) return true;
  return full_attention_every > 0 && (layer + 1) % full_attention_every == 0;
}

namespace {

Status SectionField(const char* section, const std::string& name, const std::string& why) {
  return InvalidArgumentError(std::string(section) + "." + name + ": " + why);
}

}  // namespace

Status CheckTensorParallelSplit(const ModelConfig& model, int64_t tp) {
  if (tp < 1) return SectionField("parallel", "tp", std::to_string(tp) + " must be >= 1");
  for (const auto& [what, n] : {std::pair<const char*, int64_t>{"n_heads", model.n_heads},
                                {"n_kv_heads", model.n_kv_heads},
                                {"vocab_size", model.vocab_size},
                                {"ffn_dim", model.ffn_dim}}) {
    if (n % tp != 0) {
      return SectionField(
          "parallel", "tp",
          std::to_string(tp) + " does not divide model." + what + " = " + std::to_string(n));
    }
  }
  return OkStatus();
}

Status DataConfig::Validate() const {
  if (batch_size < 1)
    return SectionField("data", "batch_size", std::to_string(batch_size) + " must be >= 1");
  if (seq_len < 1)
    return SectionField("data", "seq_len", std::to_string(seq_len) + " must be >= 1");
  if (!path.empty() && !sources.empty())
    return SectionField("data", "sources", "give either data.path or data.sources, not both");
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::string field = "sources[" + std::to_string(i) + "]";
    if (sources[i].store.empty()) return SectionField("data", field + ".store", "is empty");
    if (!(sources[i].weight > 0))
      return SectionField("data", field + ".weight",
                          std::to_string(sources[i].weight) + " must be > 0");
  }
  if (prefetch < 0 || prefetch > 1024)
    return SectionField("data", "prefetch", std::to_string(prefetch) + " must be in [0, 1024]");
  return OkStatus();
}

Status OptimConfig::Validate() const {
  if (!(lr >= 0)) return SectionField("optim", "lr", std::to_string(lr) + " must be >= 0");
  if (!(beta1 >= 0 && beta1 < 1))
    return SectionField("optim", "beta1", std::to_string(beta1) + " must be in [0, 1)");
  if (!(beta2 >= 0 && beta2 < 1))
    return SectionField("optim", "beta2", std::to_string(beta2) + " must be in [0, 1)");
  if (!(eps > 0)) return SectionField("optim", "eps", std::to_string(eps) + " must be > 0");
  if (!(weight_decay >= 0))
    return SectionField("optim", "weight_decay", std::to_string(weight_decay) + " must be >= 0");
  if (!(grad_clip >= 0))
    return SectionField("optim", "grad_clip", std::to_string(grad_clip) + " must be >= 0 (0: off)");
  if (warmup_steps < 0)
    return SectionField("optim", "warmup_steps", std::to_string(warmup_steps) + " must be >= 0");
  if (!(cooldown_fraction >= 0 && cooldown_fraction <= 1)) {
    return SectionField("optim", "cooldown_fraction",
                        std::to_string(cooldown_fraction) + " must be in [0, 1]");
  }
  return OkStatus();
}

Status ScheduleConfig::Validate() const {
  if (steps < 1) return SectionField("schedule", "steps", std::to_string(steps) + " must be >= 1");
  if (phases.empty()) return SectionField("schedule", "phases", "at least one phase is needed");
  double previous = 0;
  for (size_t i = 0; i < phases.size(); ++i) {
    const SchedulePhase& p = phases[i];
    const std::string name = "phases[" + std::to_string(i) + "]";
    if (!(p.until > previous && p.until <= 1.0)) {
      return SectionField("schedule", (name + ".until").c_str(),
                          std::to_string(p.until) + " must increase and lie in (0, 1]");
    }
    previous = p.until;
    double total = 0;
    for (const auto& [passes, prob] : p.mix) {
      if (passes < 1 || passes > 64) {
        return SectionField("schedule", (name + ".mix").c_str(),
                            "pass count " + std::to_string(passes) + " outside [1, 64]");
      }
      if (!(prob >= 0)) {
        return SectionField("schedule", (name + ".mix").c_str(),
                            "probability " + std::to_string(prob) + " of " +
                                std::to_string(passes) + " passes is negative");
      }
      total += prob;
    }
    if (std::abs(total - 1.0) > 1e-6) {
      return SectionField("schedule", (name + ".mix").c_str(),
                          "probabilities sum to " + std::to_string(total) + ", not 1");
    }
  }
  if (previous != 1.0) {
    return SectionField("schedule", "phases", "the last phase must end at until: 1.0");
  }
  return OkStatus();
}

int64_t ScheduleConfig::MaxPasses() const {
  int64_t k = 1;
  for (const SchedulePhase& p : phases) {
    for (const auto& [passes, prob] : p.mix) {
      if (prob > 0) k = std::max(k, passes);
    }
  }
  return k;
}

Status RuntimeConfig::Validate() const {
  if (device != "cpu" && device != "cuda") {
    return SectionField("runtime", "device", "expected cpu or cuda, got '" + Excerpt(device) + "'");
  }
  if (threads < 0)
    return SectionField("runtime", "threads", std::to_string(threads) + " must be >= 0");
  if (log_every < 1)
    return SectionField("runtime", "log_every", std::to_string(log_every) + " must be >= 1");
  if (!(peak_gflops >= 0)) return SectionField("runtime", "peak_gflops", "must be >= 0");
  return OkStatus();
}

Status ParallelConfig::Validate() const {
  if (tp < 1) return SectionField("parallel", "tp", std::to_string(tp) + " must be >= 1");
  if (dp < 1) return SectionField("parallel", "dp", std::to_string(dp) + " must be >= 1");
  return OkStatus();
}

Status CheckpointConfig::Validate() const {
  if (every_steps < 0) {
    return SectionField("checkpoint", "every_steps",
                        std::to_string(every_steps) + " must be >= 0 (0: only at the end)");
  }
  if (keep < 0)
    return SectionField("checkpoint", "keep", std::to_string(keep) + " must be >= 0 (0: all)");
  return OkStatus();
}

Status BudgetConfig::Validate() const {
  if (!(amount >= 0) || !std::isfinite(amount)) {
    return SectionField("budget", "amount",
                        std::to_string(amount) + " must be >= 0 (0: schedule.steps of tokens)");
  }
  return OkStatus();
}

Status LauncherConfig::Validate() const {
  if (processes < 0) {
    return SectionField("launcher", "processes",
                        std::to_string(processes) + " must be >= 0 (0: parallel.tp × parallel.dp)");
  }
  if (command.empty() || command[0].empty())
    return SectionField("launcher", "command", "must name the worker program");
  if (max_restarts < 0) {
    return SectionField("launcher", "max_restarts", std::to_string(max_restarts) + " must be >= 0");
  }
  if (!(backoff_seconds >= 0)) {
    return SectionField("launcher", "backoff_seconds",
                        std::to_string(backoff_seconds) + " must be >= 0");
  }
  if (!(max_backoff_seconds >= backoff_seconds)) {
    return SectionField(
        "launcher", "max_backoff_seconds",
        std::to_string(max_backoff_seconds) +
            " must be >= launcher.backoff_seconds = " + std::to_string(backoff_seconds));
  }
  return OkStatus();
}

// Every string of the config (paths, commands, the device) is at most kMaxConfigStringBytes.
Status CheckStringLengths(const Config& config) {
  Status status;
  const auto check = [&](const std::string& where, const std::string& value) {
    if (status.ok() && value.size() > Config::kMaxStringBytes) {
      status = InvalidArgumentError(where + ": " + std::to_string(value.size()) +
                                    " bytes, at most " + std::to_string(Config::kMaxStringBytes));
    }
  };
  VisitSections(config, [&](const char* section, const auto& part, auto&& fields) {
    fields(part, [&](const char* name, const auto& value) {
      using T = std::decay_t<decltype(value)>;
      const std::string where = std::string(section) + "." + name;
      if constexpr (std::is_same_v<T, std::string>) {
        check(where, value);
      } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
        for (size_t i = 0; i < value.size(); ++i) {
          check(where + "[" + std::to_string(i) + "]", value[i]);
        }
      } else if constexpr (std::is_same_v<T, std::vector<DataSource>>) {
        for (size_t i = 0; i < value.size(); ++i) {
          check(where + "[" + std::to_string(i) + "].store", value[i].store);
        }
      }
    });
  });
  return status;
}

Status Config::Validate() const {
  FB_RETURN_IF_ERROR(CheckStringLengths(*this));
  FB_RETURN_IF_ERROR(model.Validate());
  FB_RETURN_IF_ERROR(parallel.Validate());
  FB_RETURN_IF_ERROR(data.Validate());
  FB_RETURN_IF_ERROR(optim.Validate());
  FB_RETURN_IF_ERROR(schedule.Validate());
  FB_RETURN_IF_ERROR(checkpoint.Validate());
  FB_RETURN_IF_ERROR(budget.Validate());
  FB_RETURN_IF_ERROR(launcher.Validate());
  FB_RETURN_IF_ERROR(runtime.Validate());
  FB_RETURN_IF_ERROR(CheckTensorParallelSplit(model, parallel.tp));
  // The data-parallel split: each of the dp groups trains on batch_size / dp sequences.
  if (data.batch_size % parallel.dp != 0) {
    return SectionField("data", "batch_size",
                        std::to_string(data.batch_size) +
                            " is not divisible by parallel.dp = " + std::to_string(parallel.dp));
  }
  if (launcher.processes != 0 && launcher.processes != parallel.tp * parallel.dp) {
    return SectionField(
        "launcher", "processes",
        std::to_string(launcher.processes) +
            " is not parallel.tp × parallel.dp = " + std::to_string(parallel.tp * parallel.dp));
  }
  return OkStatus();
}

StatusOr<Config> ParseConfig(std::string_view yaml_text, std::string_view source) {
  FB_ASSIGN_OR_RETURN(const YAML::Node root, ParseYaml(yaml_text, source));
  Config config;
  if (root.IsNull()) return config;  // empty file: all defaults
  if (!root.IsMap()) {
    return InvalidArgumentError(std::string(source) + ": the top level must be a mapping");
  }
  std::set<std::string> known;
  Status status;
  VisitSections(config, [&](const char* name, auto& section, auto visit_fields) {
    known.insert(name);
    if (!status.ok()) return;
    const YAML::Node node = root[name];
    if (!node) return;
    if (!node.IsMap()) {
      status = InvalidArgumentError(Where(source, node) + ": " + name + ": expected a mapping");
      return;
    }
    FieldReader reader(source, std::string(name) + ".", node);
    visit_fields(section, reader);
    status = reader.Finish();
  });
  FB_RETURN_IF_ERROR(status);
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (!known.count(key)) {
      return InvalidArgumentError(Where(source, kv.first) + ": unknown section " + key);
    }
  }
  FB_RETURN_IF_ERROR(config.Validate().WithContext(source));
  return config;
}

StatusOr<Config> LoadConfigFile(const std::string& path) {
  FB_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  return ParseConfig(text, path);
}

std::string ConfigToYaml(const Config& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  VisitSections(config, [&](const char* name, const auto& section, auto visit_fields) {
    out << YAML::Key << name << YAML::Value << YAML::BeginMap;
    visit_fields(section, FieldWriter{out});
    out << YAML::EndMap;
  });
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace fullband
