#include "common/config.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <set>

#include "common/config_fields.h"
#include "common/file_util.h"
#include "common/yaml_util.h"

namespace fullband {
namespace {

struct FieldWriter {
  YAML::Emitter& out;
  template <typename T>
  void operator()(const char* name, const T& value) {
    out << YAML::Key << name << YAML::Value;
    Write(value);
  }
  template <typename T>
  void Write(const T& value) {
    if constexpr (HasFields<T>) {  // a nested section, e.g. launcher.slurm
      out << YAML::BeginMap;
      VisitFields(value, *this);
      out << YAML::EndMap;
    } else if constexpr (std::is_enum_v<T>) {
      out << std::string(NameOf(value));
    } else if constexpr (std::is_same_v<T, double>) {
      out << YAML::Precision(17) << value;
    } else {
      out << value;
    }
  }
  void Write(const std::vector<std::pair<int64_t, double>>& mix) {
    out << YAML::Flow << YAML::BeginMap;
    for (const auto& [passes, prob] : mix) {
      out << YAML::Key << passes << YAML::Value << YAML::Precision(17) << prob;
    }
    out << YAML::EndMap;
  }
  void Write(const std::vector<std::string>& items) {
    out << YAML::Flow << YAML::BeginSeq;
    for (const std::string& item : items) out << YAML::DoubleQuoted << item;
    out << YAML::EndSeq;
  }
  template <HasFields T>
  void Write(const std::vector<T>& entries) {
    out << YAML::BeginSeq;
    for (const T& entry : entries) {
      out << YAML::Flow << YAML::BeginMap;
      VisitFields(entry, *this);
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
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

namespace {

// True for Slurm's time formats (sbatch --time): M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, every part
// a number.
bool IsSlurmTime(std::string_view t) {
  const size_t dash = t.find('-');
  const std::string_view days = dash == std::string_view::npos ? "" : t.substr(0, dash);
  const std::string_view rest = dash == std::string_view::npos ? t : t.substr(dash + 1);
  const auto number = [](std::string_view n) {
    return !n.empty() && n.size() <= 9 &&
           n.find_first_not_of("0123456789") == std::string_view::npos;
  };
  if (dash != std::string_view::npos && !number(days)) return false;
  size_t parts = 0;
  for (size_t start = 0;; ++parts) {
    const size_t colon = rest.find(':', start);
    if (!number(rest.substr(start, colon - start))) return false;
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  return parts <= 2;
}

}  // namespace

Status SlurmConfig::Validate() const {
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"nodes", nodes},
                                    {"tasks_per_node", tasks_per_node},
                                    {"cpus_per_task", cpus_per_task},
                                    {"gpus_per_node", gpus_per_node}}) {
    if (value < 0) {
      return SectionField("launcher.slurm", name,
                          std::to_string(value) + " must be >= 0 (0: unset)");
    }
  }
  if (!time_limit.empty() && !IsSlurmTime(time_limit)) {
    return SectionField(
        "launcher.slurm", "time_limit",
        "'" + time_limit + "' is not a Slurm time (M, M:S, H:M:S, D-H, D-H:M or D-H:M:S)");
  }
  for (const auto& [name, value] :
       {std::pair<const char*, const std::string*>{"partition", &partition},
        {"account", &account},
        {"qos", &qos}}) {
    if (value->find_first_of(" \t\n\r'\"\\#") != std::string::npos) {
      return SectionField("launcher.slurm", name,
                          "'" + *value + "' holds a space, quote, backslash or '#'");
    }
  }
  if (!(pending_timeout_seconds >= 0)) {
    return SectionField("launcher.slurm", "pending_timeout_seconds",
                        std::to_string(pending_timeout_seconds) + " must be >= 0 (0: no limit)");
  }
  return OkStatus();
}

// Every string of `part` (paths, commands, the device, names), and of the structs it holds, is
// at most Config::kMaxStringBytes; `where` names `part` in the error.
template <HasFields T>
void CheckStringLengths(const std::string& where, const T& part, Status& status) {
  const auto check = [&](const std::string& name, const std::string& value) {
    if (status.ok() && value.size() > Config::kMaxStringBytes) {
      status = InvalidArgumentError(name + ": " + std::to_string(value.size()) +
                                    " bytes, at most " + std::to_string(Config::kMaxStringBytes));
    }
  };
  VisitFields(part, [&](const char* name, const auto& value) {
    using V = std::decay_t<decltype(value)>;
    const std::string field = where.empty() ? name : where + "." + name;
    if constexpr (std::is_same_v<V, std::string>) {
      check(field, value);
    } else if constexpr (std::is_same_v<V, std::vector<std::string>>) {
      for (size_t i = 0; i < value.size(); ++i)
        check(field + "[" + std::to_string(i) + "]", value[i]);
    } else if constexpr (std::is_same_v<V, std::vector<DataSource>>) {
      for (size_t i = 0; i < value.size(); ++i) {
        CheckStringLengths(field + "[" + std::to_string(i) + "]", value[i], status);
      }
    } else if constexpr (HasFields<V>) {
      CheckStringLengths(field, value, status);
    }
  });
}

Status Config::Validate() const {
  Status lengths;
  CheckStringLengths("", *this, lengths);
  FB_RETURN_IF_ERROR(lengths);
  FB_RETURN_IF_ERROR(model.Validate());
  FB_RETURN_IF_ERROR(parallel.Validate());
  FB_RETURN_IF_ERROR(data.Validate());
  FB_RETURN_IF_ERROR(optim.Validate());
  FB_RETURN_IF_ERROR(schedule.Validate());
  FB_RETURN_IF_ERROR(checkpoint.Validate());
  FB_RETURN_IF_ERROR(budget.Validate());
  FB_RETURN_IF_ERROR(launcher.Validate());
  FB_RETURN_IF_ERROR(launcher.slurm.Validate());
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
  const SlurmConfig& slurm = launcher.slurm;
  if (slurm.nodes > 0 && slurm.tasks_per_node > 0 &&
      slurm.nodes * slurm.tasks_per_node != parallel.tp * parallel.dp) {
    return SectionField("launcher", "slurm.tasks_per_node",
                        std::to_string(slurm.nodes) + " nodes × " +
                            std::to_string(slurm.tasks_per_node) +
                            " tasks is not parallel.tp × parallel.dp = " +
                            std::to_string(parallel.tp * parallel.dp));
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
  VisitFields(config, [&](const char* name, auto& section) {
    known.insert(name);
    if (!status.ok()) return;
    const YAML::Node node = root[name];
    if (!node) return;
    if (!node.IsMap()) {
      status = InvalidArgumentError(YamlWhere(source, node) + ": " + name + ": expected a mapping");
      return;
    }
    YamlFieldReader reader(source, std::string(name) + ".", node);
    VisitFields(section, reader);
    status = reader.Finish();
  });
  FB_RETURN_IF_ERROR(status);
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (!known.count(key)) {
      return InvalidArgumentError(YamlWhere(source, kv.first) + ": unknown section " + key);
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
  VisitFields(config, [&](const char* name, const auto& section) {
    out << YAML::Key << name << YAML::Value << YAML::BeginMap;
    VisitFields(section, FieldWriter{out});
    out << YAML::EndMap;
  });
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace fullband
