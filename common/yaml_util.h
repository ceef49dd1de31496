// The one way fullband parses a YAML document (jobs, coordinator.yaml, the tokens file), so that
// every reader reports a syntax error the same way: "<source>:<line>: not valid YAML: <why>".
#pragma once

#include <yaml-cpp/yaml.h>

#include <string_view>

#include "common/status.h"

namespace fullband {

// The document `text` read from `source` (a path, or a name for the reader); an empty document
// is a null node. INVALID_ARGUMENT naming the source and line for malformed YAML.
StatusOr<YAML::Node> ParseYaml(std::string_view text, std::string_view source);

}  // namespace fullband
