// `fullband ckpt ls|verify|export`: the sharded checkpoints of checkpoint/sharded.h, from the
// command line (checkpoint/FORMAT.md).
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "checkpoint/safetensors.h"
#include "checkpoint/sharded.h"
#include "cli/commands.h"
#include "cli/json_line.h"
#include "common/config.h"
#include "common/file_util.h"

namespace fullband::cli {
namespace {

using Json = nlohmann::json;

int Fail(const Status& s, bool json) {
  if (json) {
    PrintJsonLine(Json{{"ok", false}, {"error", s.ToString()}});
  } else {
    std::fprintf(stderr, "fullband ckpt: %s\n", s.ToString().c_str());
  }
  return 1;
}

std::string LayoutName(int64_t tp, int64_t dp, bool zero1) {
  return "tp" + std::to_string(tp) + " x dp" + std::to_string(dp) + (zero1 ? " zero1" : "");
}

int List(const std::string& dir, bool json) {
  StatusOr<std::vector<checkpoint::CheckpointEntry>> all = checkpoint::ListCheckpoints(dir);
  if (!all.ok()) return Fail(all.status(), json);
  if (json) {
    Json out = Json::array();
    for (const checkpoint::CheckpointEntry& e : *all) {
      Json j = {{"step", e.step}, {"path", e.path}, {"committed", e.complete}, {"bytes", e.bytes}};
      if (e.complete) {
        j["layout"] = {{"tp", e.tp}, {"dp", e.dp}, {"zero1", e.zero1}};
      } else {
        j["problem"] = e.problem;
      }
      out.push_back(std::move(j));
    }
    PrintJsonLine(out);
    return 0;
  }
  std::printf("%10s  %-9s  %-16s  %10s  %s\n", "step", "state", "layout", "MiB", "path");
  for (const checkpoint::CheckpointEntry& e : *all) {
    std::printf("%10lld  %-9s  %-16s  %10.1f  %s%s\n", static_cast<long long>(e.step),
                e.complete ? "committed" : "partial",
                e.complete ? LayoutName(e.tp, e.dp, e.zero1).c_str() : "-",
                static_cast<double>(e.bytes) / (1 << 20), e.path.c_str(),
                e.complete ? "" : ("  (" + e.problem + ")").c_str());
  }
  return 0;
}

int Verify(const std::string& path, bool json) {
  StatusOr<std::unique_ptr<checkpoint::CheckpointReader>> r =
      checkpoint::CheckpointReader::Open(path);
  if (!r.ok()) return Fail(r.status(), json);
  const Status s = (*r)->VerifyFiles();
  if (!s.ok()) return Fail(s, json);
  const checkpoint::Manifest& m = (*r)->manifest();
  uint64_t bytes = 0;
  for (const checkpoint::ShardFile& f : m.files) bytes += f.bytes;
  if (json) {
    PrintJsonLine(Json{{"ok", true},
                       {"step", m.state.step},
                       {"files", m.files.size()},
                       {"bytes", bytes},
                       {"tensors", m.tensors.size()}});
  } else {
    std::printf("ok: %s — step %lld, %zu file(s), %zu tensors, %.1f MiB, every hash matches\n",
                path.c_str(), static_cast<long long>(m.state.step), m.files.size(),
                m.tensors.size(), static_cast<double>(bytes) / (1 << 20));
  }
  return 0;
}

// A YAML scalar as JSON: integer, number, boolean or string.
Json ScalarJson(const std::string& v) {
  if (v == "true" || v == "false") return v == "true";
  char* end = nullptr;
  const long long i = std::strtoll(v.c_str(), &end, 10);
  if (!v.empty() && *end == '\0') return i;
  const double d = std::strtod(v.c_str(), &end);
  if (!v.empty() && *end == '\0') return d;
  return v;
}

// The model section of a checkpoint's config, as the JSON of `{"model": {...}}`.
StatusOr<std::string> ModelConfigJson(const std::string& config_yaml) {
  FB_ASSIGN_OR_RETURN(const Config config, ParseConfig(config_yaml, "the checkpoint's config"));
  const YAML::Node model = YAML::Load(ConfigToYaml(config))["model"];
  Json out = Json::object();
  for (const auto& kv : model) out[kv.first.as<std::string>()] = ScalarJson(kv.second.Scalar());
  return Json{{"model", out}}.dump(1) + "\n";
}

Status Export(const std::string& path, const std::string& out, const std::string& config_out) {
  FB_ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::CheckpointReader> r,
                      checkpoint::CheckpointReader::Open(path));
  const checkpoint::Manifest& m = r->manifest();
  std::vector<std::vector<float>> data;
  std::vector<checkpoint::StTensorRef> refs;
  for (const auto& [name, t] : m.tensors) {
    if (name.starts_with("optim.")) continue;
    data.emplace_back(static_cast<size_t>(checkpoint::NumElements(t.shape)));
    FB_RETURN_IF_ERROR(r->Read(name, checkpoint::WholeTensor(t.shape), data.back().data()));
    refs.push_back({name, checkpoint::StDType::kF32, t.shape, data.back().data()});
  }
  FB_ASSIGN_OR_RETURN(const std::string config, ModelConfigJson(m.state.config_yaml));
  FB_RETURN_IF_ERROR(checkpoint::WriteSafetensors(out, refs,
                                                  {{"format", "pt"},
                                                   {"producer", "fullband"},
                                                   {"step", std::to_string(m.state.step)},
                                                   {"config", config}}));
  return WriteFileDurably(config_out, config);
}

struct CkptArgs {
  std::string path, out, config_out;
  bool json = false;
};

int ExportCommand(const CkptArgs& args) {
  std::string config_out = args.config_out;
  if (config_out.empty()) {
    const std::string ext = ".safetensors";
    const std::string& out = args.out;
    config_out = (out.ends_with(ext) ? out.substr(0, out.size() - ext.size()) : out) + ".json";
  }
  const Status s = Export(args.path, args.out, config_out);
  if (!s.ok()) return Fail(s, args.json);
  if (args.json) {
    PrintJsonLine(Json{{"ok", true}, {"out", args.out}, {"config", config_out}});
  } else {
    std::printf("wrote %s and %s\n", args.out.c_str(), config_out.c_str());
  }
  return 0;
}

}  // namespace

Command AddCkpt(CLI::App& fullband) {
  CLI::App* app =
      fullband.add_subcommand("ckpt", "list, verify or export checkpoints (checkpoint/FORMAT.md)");
  app->require_subcommand(1);
  auto args = std::make_shared<CkptArgs>();
  CLI::App* ls = app->add_subcommand(
      "ls",
      "the checkpoints under a checkpoint directory: step, committed or partial, the "
      "layout that wrote it, size");
  ls->add_option("DIR", args->path, "a checkpoint directory")->required();
  CLI::App* verify = app->add_subcommand(
      "verify",
      "check a checkpoint completely: its manifest, every file's size and xxh64, every "
      "header and tensor piece; exit 1 naming what is wrong");
  verify->add_option("PATH", args->path, "a step-<N> directory")->required();
  CLI::App* exp = app->add_subcommand(
      "export",
      "one safetensors file of the parameters (docs/MODEL.md keys, full shapes), from "
      "any layout, and the model config as JSON, which PyTorch loads as they are");
  exp->add_option("PATH", args->path, "a step-<N> directory")->required();
  exp->add_option("--out", args->out, "the parameters")->type_name("FILE.safetensors")->required();
  exp->add_option("--config-out", args->config_out,
                  "the model config (default: FILE with .json for .safetensors)")
      ->type_name("FILE.json");
  for (CLI::App* verb : {ls, verify, exp}) {
    verb->add_flag("--json", args->json, "one JSON object (or array, for ls)");
  }
  return {app, [ls, verify, args] {
            if (ls->parsed()) return List(args->path, args->json);
            if (verify->parsed()) return Verify(args->path, args->json);
            return ExportCommand(*args);
          }};
}

}  // namespace fullband::cli
