// The one way fullband parses a YAML document (jobs, coordinator.yaml, the tokens file), so that
// every reader reports a syntax error the same way: "<source>:<line>: not valid YAML: <why>";
// and the one reader of a mapping into a struct's fields, so that every bad key or value is
// reported the same way: "<source>:<line>: <path>: expected <what>, got <value>".
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/visit_fields.h"

namespace fullband {

// The document `text` read from `source` (a path, or a name for the reader); an empty document
// is a null node. INVALID_ARGUMENT naming the source and line for malformed YAML.
StatusOr<YAML::Node> ParseYaml(std::string_view text, std::string_view source);

// "<source>:<line>" of a node (the line omitted where the node has none).
std::string YamlWhere(std::string_view source, const YAML::Node& node);

// Reads a mapping into a struct, field by field: pass it as the visitor of VisitFields, then
// call Finish. An absent key keeps the field's default; an unknown key, or a value of the wrong
// type, is INVALID_ARGUMENT naming "<source>:<line>: <prefix><key>". Fields can be int64_t,
// double (finite), bool, std::string, an enum with an `EnumNames(E)` table of
// {value, name} pairs, a list of strings, a mapping {integer: number} (a vector of pairs), a
// nested struct with VisitFields (common/visit_fields.h), or a list of thems (whose `RequiredFields(entry)` keys must appear).
class YamlFieldReader {
 public:
  YamlFieldReader(std::string_view source, std::string prefix, const YAML::Node& map)
      : source_(source), prefix_(std::move(prefix)), map_(map) {}

  template <typename T>
  void operator()(const char* name, T& field) {
    seen_.insert(name);
    if (!status_.ok()) return;
    const YAML::Node node = map_[name];
    if (!node) return;  // keeps the default
    status_ = Read(node, prefix_ + name, field);
  }

  // The first error, else INVALID_ARGUMENT for a key no field read.
  Status Finish() const;

 private:
  Status Error(const YAML::Node& node, const std::string& path, const std::string& what) const;
  Status Read(const YAML::Node& node, const std::string& path, int64_t& out) const;
  Status Read(const YAML::Node& node, const std::string& path, double& out) const;
  Status Read(const YAML::Node& node, const std::string& path, bool& out) const;
  Status Read(const YAML::Node& node, const std::string& path, std::string& out) const;
  Status Read(const YAML::Node& node, const std::string& path, std::vector<std::string>& out) const;
  Status Read(const YAML::Node& node, const std::string& path,
              std::vector<std::pair<int64_t, double>>& out) const;

  template <typename E>
  requires std::is_enum_v<E> Status Read(const YAML::Node& node, const std::string& path, E& out)
  const {
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

  template <HasFields T>
  Status Read(const YAML::Node& node, const std::string& path, T& out) const {
    if (!node.IsMap()) return Error(node, path, "a mapping");
    YamlFieldReader reader(source_, path + ".", node);
    VisitFields(out, reader);
    return reader.Finish();
  }

  template <HasFields T>
  Status Read(const YAML::Node& node, const std::string& path, std::vector<T>& out) const {
    if (!node.IsSequence()) return Error(node, path, "a list of mappings");
    std::vector<T> entries(node.size());
    for (size_t i = 0; i < node.size(); ++i) {
      const YAML::Node entry = node[i];
      const std::string here = path + "[" + std::to_string(i) + "]";
      if (!entry.IsMap()) return Error(entry, here, "a mapping");
      for (std::string_view required : RequiredFields(entries[i])) {
        if (!entry[std::string(required)]) {
          return InvalidArgumentError(YamlWhere(source_, entry) + ": " + here + "." +
                                      std::string(required) + " is required");
        }
      }
      FB_RETURN_IF_ERROR(Read(entry, here, entries[i]));
    }
    out = std::move(entries);
    return OkStatus();
  }

  std::string_view source_;
  std::string prefix_;
  const YAML::Node& map_;
  std::set<std::string> seen_;
  Status status_;
};

}  // namespace fullband
