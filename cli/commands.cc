// `fullband backends` and `fullband config check`.
#include "cli/commands.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "common/config.h"
#include "ops/backend.h"

namespace fullband::cli {
namespace {

// JSON string literal (config paths and error messages may hold quotes or backslashes).
std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

int Backends(bool json) {
  if (json) std::printf("[");
  bool first = true;
  for (ops::Device device : {ops::Device::kCpu, ops::Device::kCuda}) {
    ops::BackendOptions options;
    options.device = device;
    auto backend = ops::CreateBackend(options);
    // The backend's name when it works, else why it does not.
    const std::string text = backend.ok() ? (*backend)->name() : backend.status().message();
    if (json) {
      std::printf("%s{\"device\": %s, \"available\": %s, \"%s\": %s}", first ? "" : ", ",
                  Quote(ops::DeviceName(device)).c_str(), backend.ok() ? "true" : "false",
                  backend.ok() ? "name" : "reason", Quote(text).c_str());
    } else {
      std::printf("%-5s %-11s %s\n", ops::DeviceName(device),
                  backend.ok() ? "available" : "unavailable", text.c_str());
    }
    first = false;
  }
  if (json) std::printf("]\n");
  return 0;
}

// `config check FILE`: exit 2 when the file is not a valid configuration.
int CheckConfig(const std::string& path, bool json) {
  StatusOr<Config> config = LoadConfigFile(path);
  if (!config.ok()) {
    if (json) {
      std::printf("{\"ok\": false, \"error\": %s}\n", Quote(config.status().message()).c_str());
    } else {
      std::fprintf(stderr, "fullband config: %s\n", config.status().message().c_str());
    }
    return 2;
  }
  if (json) {
    std::printf("{\"ok\": true, \"config\": %s}\n", Quote(ConfigToYaml(*config)).c_str());
  } else {
    std::fputs(ConfigToYaml(*config).c_str(), stdout);
  }
  return 0;
}

}  // namespace

Command AddBackends(CLI::App& fullband) {
  CLI::App* app = fullband.add_subcommand(
      "backends", "list the compute backends available here (CPU features, CUDA devices)");
  auto json = std::make_shared<bool>(false);
  app->add_flag("--json", *json, "one JSON array of {device, available, name or reason}");
  return {app, [json] { return Backends(*json); }};
}

Command AddConfig(CLI::App& fullband) {
  CLI::App* app = fullband.add_subcommand("config", "check a configuration file");
  app->require_subcommand(1);
  CLI::App* check = app->add_subcommand(
      "check", "load and validate FILE; print the full configuration with defaults filled in");
  struct Args {
    std::string file;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  check->add_option("FILE", args->file, "a YAML configuration")->required();
  check->add_flag("--json", args->json, "print {\"ok\": ..., \"config\" or \"error\": ...}");
  return {app, [args] { return CheckConfig(args->file, args->json); }};
}

}  // namespace fullband::cli
