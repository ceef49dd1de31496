// `fullband backends` and `fullband config check`.
#include "cli/commands.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/backend_client_options.h"
#include "cli/json_line.h"
#include "common/config.h"
#include "ops/backend.h"

namespace fullband::cli {
namespace {

int Backends(ops::BackendOptions options, bool json) {
  OrderedJson all = OrderedJson::array();
  for (ops::Device device : {ops::Device::kCpu, ops::Device::kCuda}) {
    options.device = device;
    auto backend = ops::CreateBackend(options);
    // The backend's name when it works, else why it does not.
    const std::string text = backend.ok() ? (*backend)->name() : backend.status().message();
    if (json) {
      all.push_back({{"device", ops::DeviceName(device)},
                     {"available", backend.ok()},
                     {backend.ok() ? "name" : "reason", text}});
    } else {
      std::printf("%-5s %-11s %s\n", ops::DeviceName(device),
                  backend.ok() ? "available" : "unavailable", text.c_str());
    }
  }
  if (json) PrintJsonLine(all);
  return 0;
}

// `config check FILE`: exit 2 when the file is not a valid configuration.
int CheckConfig(const std::string& path, bool json) {
  StatusOr<Config> config = LoadConfigFile(path);
  if (!config.ok()) {
    if (json) {
      PrintJsonLine(OrderedJson{{"ok", false}, {"error", config.status().message()}});
    } else {
      std::fprintf(stderr, "fullband config: %s\n", config.status().message().c_str());
    }
    return 2;
  }
  if (json) {
    PrintJsonLine(OrderedJson{{"ok", true}, {"config", ConfigToYaml(*config)}});
  } else {
    std::fputs(ConfigToYaml(*config).c_str(), stdout);
  }
  return 0;
}

}  // namespace

Command AddBackends(CLI::App& fullband) {
  CLI::App* app = fullband.add_subcommand(
      "backends", "list the compute backends available here (CPU features, CUDA devices)");
  struct Args {
    ops::BackendOptions backend;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  app->add_flag("--json", args->json, "one JSON array of {device, available, name or reason}");
  AddBackendOptions(*app, &args->backend);
  return {app, [args] { return Backends(args->backend, args->json); }};
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
