// The command line of a program under bench/, declared with CLI11 like fullband's (cli/main.cc,
// cli/options.h): a flag given twice takes its last value, --help prints the help CLI11 writes
// from the options' descriptions, and bad usage exits 2 with one line on stderr before any work.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "cli/options.h"

namespace fullband::bench {

class CommandLine {
 public:
  CommandLine(const std::string& name, const std::string& description) : app_(description, name) {
    // Before any option is added: options take their policy from these defaults.
    app_.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }

  CLI::App& app() { return app_; }

  // --name N: an integer in [min, max], its default shown in --help. A value out of Int's range
  // is refused too (by CLI11's conversion).
  template <typename Int>
  CLI::Option* AddInt(const std::string& name, Int* value, const std::string& description,
                      int64_t min, int64_t max = INT64_MAX) {
    return app_.add_option(name, *value, description)
        ->type_name("N")
        ->transform(cli::IntIn(min, max))
        ->capture_default_str();
  }

  // --name X: a finite number, its default shown in --help.
  CLI::Option* AddNumber(const std::string& name, double* value, const std::string& description) {
    return app_.add_option(name, *value, description)
        ->type_name("X")
        ->check(cli::FiniteNumber())
        ->capture_default_str();
  }

  // --name X: a number > 0 (a duration, a rate), its default shown in --help.
  CLI::Option* AddPositiveNumber(const std::string& name, double* value,
                                 const std::string& description) {
    return AddNumber(name, value, description)
        ->check(CLI::Validator(
            [](const std::string& v) {
              return std::strtod(v.c_str(), nullptr) > 0 ? std::string()
                                                         : "expected a number > 0, got '" + v + "'";
            },
            "> 0"));
  }

  // --name TYPE: a string, such as a path, its default (if any) shown in --help.
  CLI::Option* AddString(const std::string& name, std::string* value, const std::string& type,
                         const std::string& description) {
    return app_.add_option(name, *value, description)->type_name(type)->capture_default_str();
  }

  // Parses the arguments into the options' variables. nullopt when the program goes on; else
  // the code it exits with: 0 after --help, 2 after bad usage.
  std::optional<int> Parse(int argc, char** argv) {
    try {
      app_.parse(argc, argv);
    } catch (const CLI::CallForHelp&) {
      std::fputs(app_.help().c_str(), stdout);
      return 0;
    } catch (const CLI::ParseError& e) {
      const std::string name = app_.get_name();
      std::fprintf(stderr, "%s: %s (%s --help)\n", name.c_str(), e.what(), name.c_str());
      return 2;
    }
    return std::nullopt;
  }

 private:
  CLI::App app_;
};

}  // namespace fullband::bench
