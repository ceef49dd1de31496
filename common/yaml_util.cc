#include "common/yaml_util.h"

#include <cmath>
#include <sstream>
#include <string>

namespace fullband {

StatusOr<YAML::Node> ParseYaml(std::string_view text, std::string_view source) {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string(source) + ":" + std::to_string(e.mark.line + 1) +
                                ": not valid YAML: " + e.msg);
  }
}

std::string YamlWhere(std::string_view source, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  std::string out(source);
  if (mark.line >= 0) out += ":" + std::to_string(mark.line + 1);
  return out;
}

namespace {

std::string Describe(const YAML::Node& node) {
  if (node.IsScalar()) return "'" + Excerpt(node.Scalar()) + "'";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "null";
}

}  // namespace

Status YamlFieldReader::Finish() const {
  if (!status_.ok()) return status_;
  for (const auto& kv : map_) {
    const std::string key = kv.first.as<std::string>();
    if (!seen_.count(key)) {
      return InvalidArgumentError(YamlWhere(source_, kv.first) + ": unknown field " + prefix_ +
                                  key);
    }
  }
  return OkStatus();
}

Status YamlFieldReader::Error(const YAML::Node& node, const std::string& path,
                              const std::string& what) const {
  return InvalidArgumentError(YamlWhere(source_, node) + ": " + path + ": expected " + what +
                              ", got " + Describe(node));
}

Status YamlFieldReader::Read(const YAML::Node& node, const std::string& path, int64_t& out) const {
  if (!node.IsScalar()) return Error(node, path, "an integer");
  std::istringstream in(node.Scalar());
  int64_t v;
  if (!(in >> v) || !in.eof()) return Error(node, path, "an integer");
  out = v;
  return OkStatus();
}

Status YamlFieldReader::Read(const YAML::Node& node, const std::string& path, double& out) const {
  if (!node.IsScalar()) return Error(node, path, "a number");
  std::istringstream in(node.Scalar());
  double v;
  if (!(in >> v) || !in.eof() || !std::isfinite(v)) return Error(node, path, "a number");
  out = v;
  return OkStatus();
}

Status YamlFieldReader::Read(const YAML::Node& node, const std::string& path, bool& out) const {
  if (!node.IsScalar() || (node.Scalar() != "true" && node.Scalar() != "false")) {
    return Error(node, path, "true or false");
  }
  out = node.Scalar() == "true";
  return OkStatus();
}

Status YamlFieldReader::Read(const YAML::Node& node, const std::string& path,
                             std::string& out) const {
  if (!node.IsScalar()) return Error(node, path, "a string");
  out = node.Scalar();
  return OkStatus();
}

// command: [fullband, worker]
Status YamlFieldReader::Read(const YAML::Node& node, const std::string& path,
                             std::vector<std::string>& out) const {
  if (!node.IsSequence()) return Error(node, path, "a list of strings");
  std::vector<std::string> items(node.size());
  for (size_t i = 0; i < node.size(); ++i) {
    FB_RETURN_IF_ERROR(Read(node[i], path + "[" + std::to_string(i) + "]", items[i]));
  }
  out = std::move(items);
  return OkStatus();
}

// mix: {1: 0.75, 2: 0.25}, passes to probability.
Status YamlFieldReader::Read(const YAML::Node& node, const std::string& path,
                             std::vector<std::pair<int64_t, double>>& out) const {
  if (!node.IsMap() || node.size() == 0) return Error(node, path, "a mapping {integer: number}");
  std::vector<std::pair<int64_t, double>> pairs;
  for (const auto& kv : node) {
    int64_t key;
    double value;
    FB_RETURN_IF_ERROR(Read(kv.first, path + " key", key));
    FB_RETURN_IF_ERROR(Read(kv.second, path + "[" + kv.first.Scalar() + "]", value));
    pairs.emplace_back(key, value);
  }
  out = std::move(pairs);
  return OkStatus();
}

}  // namespace fullband
