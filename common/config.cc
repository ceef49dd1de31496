#include "common/config.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

namespace fullband {
namespace {

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

std::string Describe(const YAML::Node& node) {
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
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
        return InvalidArgumentError(Where(source_, kv.first) + ": unknown field " + prefix_ +
                                    key);
      }
    }
    return OkStatus();
  }

 private:
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
  Status Read(const YAML::Node& node, const std::string& path, FeedbackLoss& out) {
    if (node.IsScalar() && node.Scalar() == "mean") {
      out = FeedbackLoss::kMean;
    } else if (node.IsScalar() && node.Scalar() == "sum") {
      out = FeedbackLoss::kSum;
    } else {
      return Error(node, path, "one of mean, sum");
    }
    return OkStatus();
  }
  Status Read(const YAML::Node& node, const std::string& path, FeedbackState& out) {
    if (node.IsScalar() && node.Scalar() == "post_norm") {
      out = FeedbackState::kPostNorm;
    } else if (node.IsScalar() && node.Scalar() == "pre_norm") {
      out = FeedbackState::kPreNorm;
    } else {
      return Error(node, path, "one of post_norm, pre_norm");
    }
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
    if constexpr (std::is_same_v<T, FeedbackLoss>) {
      out << std::string(FeedbackLossName(value));
    } else if constexpr (std::is_same_v<T, FeedbackState>) {
      out << std::string(FeedbackStateName(value));
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

std::string_view FeedbackLossName(FeedbackLoss v) {
  return v == FeedbackLoss::kMean ? "mean" : "sum";
}
std::string_view FeedbackStateName(FeedbackState v) {
  return v == FeedbackState::kPostNorm ? "post_norm" : "pre_norm";
}

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
    return Field("ignore_id", std::to_string(ignore_id) +
                                  " is a token id; it must lie outside [0, vocab_size)");
  }
  if (!(z_loss >= 0)) return Field("z_loss", std::to_string(z_loss) + " must be >= 0");
  if (!(jitter >= 0)) return Field("jitter", std::to_string(jitter) + " must be >= 0");
  return OkStatus();
}

bool ModelConfig::IsFullAttentionLayer(int64_t layer) const {
  if (window == 0) return true;
  return full_attention_every > 0 && (layer + 1) % full_attention_every == 0;
}

Status Config::Validate() const { return model.Validate(); }

StatusOr<Config> ParseConfig(std::string_view yaml_text, std::string_view source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string(source) + ":" + std::to_string(e.mark.line + 1) +
                                ": not valid YAML: " + e.msg);
  }
  Config config;
  if (root.IsNull()) return config;  // empty file: all defaults
  if (!root.IsMap()) {
    return InvalidArgumentError(std::string(source) + ": the top level must be a mapping");
  }
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (key != "model") {
      return InvalidArgumentError(Where(source, kv.first) + ": unknown section " + key);
    }
  }
  if (const YAML::Node model = root["model"]) {
    if (!model.IsMap()) {
      return InvalidArgumentError(Where(source, model) + ": model: expected a mapping");
    }
    FieldReader reader(source, "model.", model);
    VisitModelFields(config.model, reader);
    FB_RETURN_IF_ERROR(reader.Finish());
  }
  FB_RETURN_IF_ERROR(config.Validate().WithContext(source));
  return config;
}

StatusOr<Config> LoadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot read config file " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return ParseConfig(text.str(), path);
}

std::string ConfigToYaml(const Config& config) {
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  VisitModelFields(config.model, FieldWriter{out});
  out << YAML::EndMap << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace fullband
