// What several commands declare alike: checked numbers, and the options that fall back to an
// environment variable (README.md, "Command line"). fullband reads its environment through such
// options' CLI11 envname (these, cli/backend_client_options.h, `fullband worker`'s launcher
// options and --log-level), never in the libraries: a flag wins over its variable, which wins
// over the default. The library fullband_cli_options (cli/CMakeLists.txt) holds these for
// fullband and the programs under bench/.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/config_fields.h"

namespace fullband::cli {

// An integer in [min, max], in decimal. Use with Option::transform: the value is rewritten in
// canonical decimal, so that CLI11's own conversion (which reads 010 as octal) sees what was
// checked. The error names the flag and the value.
CLI::Validator IntIn(int64_t min, int64_t max = INT64_MAX);

// A finite number (not nan or inf).
CLI::Validator FiniteNumber();

// Makes `option` take one of the names of `choices`, each standing for an integer (the value of
// the enum or bool the option sets), and lists the names as its type in --help.
CLI::Option* OneOf(CLI::Option* option,
                   const std::vector<std::pair<std::string, int64_t>>& choices);

// OneOf for an option that sets an enum: the names of its NameTable (common/config_fields.h),
// spelled as configs spell them.
template <typename E, size_t N>
CLI::Option* OneOf(CLI::Option* option, const NameTable<E, N>& names) {
  std::vector<std::pair<std::string, int64_t>> choices;
  for (const auto& [value, name] : names) {
    choices.emplace_back(std::string(name), static_cast<int64_t>(value));
  }
  return OneOf(option, choices);
}

// --tokenizer RANKS (FULLBAND_TOKENIZER_RANKS, else the file scripts/fetch_deps.sh fetched).
void AddTokenizerOption(CLI::App& app, std::string* ranks);

}  // namespace fullband::cli
