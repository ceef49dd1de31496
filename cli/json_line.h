// One JSON value per line on stdout, for the commands' --json output.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace fullband::cli {

// Keys in the order they were inserted, as the commands document them.
using OrderedJson = nlohmann::ordered_json;

// Prints `value` on one line. Strings that are not UTF-8 (a path or a message quoting a file's
// bytes) have those bytes replaced by U+FFFD rather than failing the command.
template <typename Json>
void PrintJsonLine(const Json& value) {
  const std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::printf("%s\n", text.c_str());
}

}  // namespace fullband::cli
