#include "cli/commands.h"

#include <cstdio>

#include "common/config.h"
#include "ops/backend.h"

namespace fullband::cli {
namespace {

bool HasFlag(const std::vector<std::string>& args, const char* flag) {
  for (const auto& a : args) {
    if (a == flag) return true;
  }
  return false;
}

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

}  // namespace

int RunBackends(const std::vector<std::string>& args) {
  if (HasFlag(args, "--help")) {
    std::printf("usage: fullband backends [--json]\n  Lists the compute backends usable here.\n");
    return 0;
  }
  const bool json = HasFlag(args, "--json");
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

int RunConfig(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] != "check" || args.size() < 2) {
    std::printf(
        "usage: fullband config check FILE [--json]\n"
        "  Loads and validates FILE; prints the full configuration with defaults filled in\n"
        "  (YAML), or {\"ok\": ..., \"error\": ...} with --json.\n");
    return args.empty() || args[0] != "--help" ? 2 : 0;
  }
  const bool json = HasFlag(args, "--json");
  StatusOr<Config> config = LoadConfigFile(args[1]);
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

}  // namespace fullband::cli
