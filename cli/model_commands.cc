// `fullband model init` and `fullband model grad` (README.md, "Command line"): the single-process
// entry points that let any implementation of the model be checked against this one.
#include <cstdio>
#include <cstring>

#include "checkpoint/safetensors.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/config.h"
#include "common/model_params.h"
#include "ops/backend.h"
#include "worker/model.h"

namespace fullband::cli {
namespace {

constexpr char kModelUsage[] =
    "usage:\n"
    "  fullband model init --config M.yaml --seed S --out W.safetensors\n"
    "      Writes freshly initialized weights (docs/MODEL.md init, seeded).\n"
    "  fullband model grad --config M.yaml --weights W.safetensors --batch B.safetensors\n"
    "                      --passes K [--jitter X] [--mixin on|off] [--seed S]\n"
    "                      [--recompute none|selective|full] --out G.safetensors\n"
    "      One K-pass step: reads `tokens` (int32, (B, T+1)) from the batch file, writes\n"
    "      loss.pass{k}, loss.total, grad.<key> for every weight and plain.pass{k} (u8 (B, T),\n"
    "      the plain masks drawn for passes k >= 2). --jitter/--mixin override the config.\n";

int Fail(const Status& s) {
  std::fprintf(stderr, "fullband model: %s\n", s.message().c_str());
  return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound ? 2 : 1;
}

Status Init(const Flags& flags) {
  FB_ASSIGN_OR_RETURN(std::string config_path, flags.Required("config"));
  FB_ASSIGN_OR_RETURN(std::string out, flags.Required("out"));
  FB_ASSIGN_OR_RETURN(int64_t seed, flags.GetInt("seed", 0));
  FB_ASSIGN_OR_RETURN(Config config, LoadConfigFile(config_path));
  FB_ASSIGN_OR_RETURN(std::unique_ptr<ops::Backend> backend, ops::CreateBackend({}));
  FB_ASSIGN_OR_RETURN(std::unique_ptr<worker::Model> model,
                      worker::Model::Create(config.model, {}, backend.get()));
  model->InitParameters(static_cast<uint64_t>(seed));
  FB_RETURN_IF_ERROR(model->SaveParameters(out));
  std::printf("wrote %s: %ld parameters in %zu tensors\n", out.c_str(),
              static_cast<long>(ModelParameterCount(model->config())),
              model->table().specs().size());
  return OkStatus();
}

Status Grad(const Flags& flags) {
  FB_ASSIGN_OR_RETURN(std::string config_path, flags.Required("config"));
  FB_ASSIGN_OR_RETURN(std::string weights, flags.Required("weights"));
  FB_ASSIGN_OR_RETURN(std::string batch_path, flags.Required("batch"));
  FB_ASSIGN_OR_RETURN(std::string out, flags.Required("out"));
  FB_ASSIGN_OR_RETURN(int64_t passes, flags.GetInt("passes", 1));
  FB_ASSIGN_OR_RETURN(int64_t seed, flags.GetInt("seed", 0));
  FB_ASSIGN_OR_RETURN(Config config, LoadConfigFile(config_path));
  FB_ASSIGN_OR_RETURN(double jitter, flags.GetDouble("jitter", config.model.jitter));
  FB_ASSIGN_OR_RETURN(Recompute recompute, worker::ParseRecompute(flags.Get("recompute", "none")));
  const std::string mixin = flags.Get("mixin", config.model.prefix_mixin ? "on" : "off");
  if (mixin != "on" && mixin != "off") {
    return InvalidArgumentError("--mixin: expected on or off, got '" + mixin + "'");
  }
  if (passes < 1 || passes > 64) {
    return InvalidArgumentError("--passes: " + std::to_string(passes) + " outside [1, 64]");
  }
  FB_ASSIGN_OR_RETURN(checkpoint::SafetensorsFile batch,
                      checkpoint::SafetensorsFile::Read(batch_path));
  FB_ASSIGN_OR_RETURN(const checkpoint::SafetensorsFile::Entry* tokens,
                      batch.Find("tokens", checkpoint::StDType::kI32));
  if (tokens->shape.size() != 2 || tokens->shape[0] < 1 || tokens->shape[1] < 2) {
    return InvalidArgumentError(batch_path + ": tokens must be (B, T+1) with B >= 1, T >= 1; got " +
                                checkpoint::ShapeString(tokens->shape));
  }
  const int64_t b = tokens->shape[0], t = tokens->shape[1] - 1;
  std::vector<int32_t> ids(b * (t + 1));
  std::memcpy(ids.data(), batch.data(*tokens), tokens->bytes);

  FB_ASSIGN_OR_RETURN(std::unique_ptr<ops::Backend> backend, ops::CreateBackend({}));
  worker::ModelShape shape;
  shape.max_batch = b;
  shape.max_seq = t;
  shape.max_passes = static_cast<int>(passes);
  shape.recompute = recompute;
  FB_ASSIGN_OR_RETURN(std::unique_ptr<worker::Model> model,
                      worker::Model::Create(config.model, shape, backend.get()));
  FB_RETURN_IF_ERROR(model->LoadParameters(weights));
  worker::StepOptions options;
  options.passes = static_cast<int>(passes);
  options.jitter = jitter;
  options.prefix_mixin = mixin == "on";
  options.seed = static_cast<uint64_t>(seed);
  model->ZeroGradients();
  FB_ASSIGN_OR_RETURN(worker::StepResult r, model->Step(ids.data(), b, t, options));

  std::vector<std::pair<std::string, float>> scalars;
  for (size_t k = 0; k < r.pass_loss.size(); ++k) {
    scalars.emplace_back("loss.pass" + std::to_string(k + 1), static_cast<float>(r.pass_loss[k]));
  }
  scalars.emplace_back("loss.total", static_cast<float>(r.total));
  std::vector<std::pair<std::string, std::vector<uint8_t>>> masks;
  for (size_t k = 0; k < r.plain.size(); ++k) {
    masks.emplace_back("plain.pass" + std::to_string(k + 2), r.plain[k]);
  }
  FB_RETURN_IF_ERROR(model->SaveGradients(out, scalars, masks, b, t));
  std::printf("loss.total %.6f", r.total);
  for (size_t k = 0; k < r.pass_loss.size(); ++k)
    std::printf(" pass%zu %.6f", k + 1, r.pass_loss[k]);
  std::printf("\n");
  return OkStatus();
}

}  // namespace

int RunModel(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kModelUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "init") {
    StatusOr<Flags> flags = Flags::Parse(rest, {"config", "seed", "out"}, {});
    if (!flags.ok()) return Fail(flags.status());
    const Status s = Init(*flags);
    return s.ok() ? 0 : Fail(s);
  }
  if (args[0] == "grad") {
    StatusOr<Flags> flags = Flags::Parse(
        rest,
        {"config", "weights", "batch", "passes", "jitter", "mixin", "seed", "recompute", "out"},
        {});
    if (!flags.ok()) return Fail(flags.status());
    const Status s = Grad(*flags);
    return s.ok() ? 0 : Fail(s);
  }
  std::fprintf(stderr, "fullband model: unknown subcommand '%s'\n%s", args[0].c_str(), kModelUsage);
  return 2;
}

}  // namespace fullband::cli
