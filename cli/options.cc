#include "cli/options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "dataloader/tokenizer.h"

namespace fullband::cli {

CLI::Validator IntIn(int64_t min, int64_t max) {
  std::string range;  // "" for any integer
  if (max != INT64_MAX) {
    range = "in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  } else if (min != INT64_MIN) {
    range = ">= " + std::to_string(min);
  }
  return CLI::Validator(
      [min, max, range](std::string& value) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(value.c_str(), &end, 10);
        if (value.empty() || errno != 0 || *end != '\0' || v < min || v > max) {
          return "expected an integer" + (range.empty() ? "" : " " + range) + ", got '" + value +
                 "'";
        }
        value = std::to_string(v);
        return "";
      },
      range);
}

CLI::Validator FiniteNumber() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (value.empty() || *end != '\0' || !std::isfinite(v)) {
          return "expected a number, got '" + value + "'";
        }
        return "";
      },
      "");
}

CLI::Option* OneOf(CLI::Option* option,
                   const std::vector<std::pair<std::string, int64_t>>& choices) {
  std::string names;
  for (const auto& [name, value] : choices) names += (names.empty() ? "" : "|") + name;
  option->type_name(names);
  return option->transform(CLI::Validator(
      [choices, names](std::string& value) -> std::string {
        for (const auto& [name, v] : choices) {
          if (value == name) {
            value = std::to_string(v);
            return "";
          }
        }
        return "expected one of " + names + ", got '" + value + "'";
      },
      ""));
}

void AddTokenizerOption(CLI::App& app, std::string* ranks) {
  *ranks = dataloader::Tokenizer::DefaultRanksPath();
  app.add_option("--tokenizer", *ranks, "the tokenizer's BPE ranks (docs/DATA.md)")
      ->type_name("RANKS")
      ->envname("FULLBAND_TOKENIZER_RANKS")
      ->capture_default_str();
}

}  // namespace fullband::cli
