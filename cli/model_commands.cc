// `fullband model init` and `fullband model grad` (README.md, "Command line"): the single-process
// entry points that let any implementation of the model be checked against this one.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "checkpoint/safetensors.h"
#include "cli/backend_client_options.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "common/config.h"
#include "common/model_params.h"
#include "model/model.h"
#include "ops/backend.h"

namespace fullband::cli {
namespace {

struct InitArgs {
  std::string config, out;
  int64_t seed = 0;
  ops::BackendOptions backend;  // CPU; the kernels' instruction set
};

struct GradArgs {
  std::string config, weights, batch, out;
  int64_t passes = 1, seed = 0;
  std::optional<double> jitter;      // else the config's
  std::optional<bool> prefix_mixin;  // --mixin on|off, else the config's
  Recompute recompute = Recompute::kNone;
  ops::BackendOptions backend;  // CPU; the kernels' instruction set
};

int Fail(const Status& s) {
  std::fprintf(stderr, "fullband model: %s\n", s.message().c_str());
  return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound ? 2 : 1;
}

Status Init(const InitArgs& args) {
  FB_ASSIGN_OR_RETURN(Config config, LoadConfigFile(args.config));
  FB_ASSIGN_OR_RETURN(std::unique_ptr<ops::Backend> backend, ops::CreateBackend(args.backend));
  FB_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model,
                      model::Model::Create(config.model, {}, backend.get()));
  model->InitParameters(static_cast<uint64_t>(args.seed));
  FB_RETURN_IF_ERROR(model->SaveParameters(args.out));
  std::printf("wrote %s: %ld parameters in %zu tensors\n", args.out.c_str(),
              static_cast<long>(ModelParameterCount(model->config())),
              model->table().specs().size());
  return OkStatus();
}

Status Grad(const GradArgs& args) {
  FB_ASSIGN_OR_RETURN(Config config, LoadConfigFile(args.config));
  const std::string& batch_path = args.batch;
  const int passes = static_cast<int>(args.passes);
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

  FB_ASSIGN_OR_RETURN(std::unique_ptr<ops::Backend> backend, ops::CreateBackend(args.backend));
  model::ModelShape shape;
  shape.max_batch = b;
  shape.max_seq = t;
  shape.max_passes = passes;
  shape.recompute = args.recompute;
  FB_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model,
                      model::Model::Create(config.model, shape, backend.get()));
  FB_RETURN_IF_ERROR(model->LoadParameters(args.weights));
  model::StepOptions options;
  options.passes = passes;
  options.jitter = args.jitter.value_or(config.model.jitter);
  options.prefix_mixin = args.prefix_mixin.value_or(config.model.prefix_mixin);
  options.seed = static_cast<uint64_t>(args.seed);
  model->ZeroGradients();
  FB_ASSIGN_OR_RETURN(model::StepResult r, model->Step(ids.data(), b, t, options));

  std::vector<std::pair<std::string, float>> scalars;
  for (size_t k = 0; k < r.pass_loss.size(); ++k) {
    scalars.emplace_back("loss.pass" + std::to_string(k + 1), static_cast<float>(r.pass_loss[k]));
  }
  scalars.emplace_back("loss.total", static_cast<float>(r.total));
  std::vector<std::pair<std::string, std::vector<uint8_t>>> masks;
  for (size_t k = 0; k < r.plain.size(); ++k) {
    masks.emplace_back("plain.pass" + std::to_string(k + 2), r.plain[k]);
  }
  FB_RETURN_IF_ERROR(model->SaveGradients(args.out, scalars, masks, b, t));
  std::printf("loss.total %.6f", r.total);
  for (size_t k = 0; k < r.pass_loss.size(); ++k)
    std::printf(" pass%zu %.6f", k + 1, r.pass_loss[k]);
  std::printf("\n");
  return OkStatus();
}

}  // namespace

Command AddModel(CLI::App& fullband) {
  CLI::App* app = fullband.add_subcommand(
      "model", "initialize weights, or run one K-pass step and write its gradients (init|grad)");
  app->require_subcommand(1);

  CLI::App* init =
      app->add_subcommand("init", "write freshly initialized weights (docs/MODEL.md init, seeded)");
  auto i = std::make_shared<InitArgs>();
  init->add_option("--config", i->config, "the model's configuration")
      ->type_name("M.yaml")
      ->required();
  init->add_option("--seed", i->seed, "initialization seed")
      ->type_name("S")
      ->transform(IntIn(INT64_MIN))
      ->capture_default_str();
  AddBackendOptions(*init, &i->backend);
  init->add_option("--out", i->out, "weights to write")->type_name("W.safetensors")->required();

  CLI::App* grad = app->add_subcommand("grad", "one K-pass step; write its losses and gradients");
  grad->footer(
      "Reads `tokens` (int32, (B, T+1)) from the batch file, writes loss.pass{k}, loss.total,\n"
      "grad.<key> for every weight and plain.pass{k} (u8 (B, T), the plain masks drawn for\n"
      "passes k >= 2).");
  auto g = std::make_shared<GradArgs>();
  grad->add_option("--config", g->config, "the model's configuration")
      ->type_name("M.yaml")
      ->required();
  grad->add_option("--weights", g->weights, "weights to load")
      ->type_name("W.safetensors")
      ->required();
  grad->add_option("--batch", g->batch, "`tokens`, int32 (B, T+1)")
      ->type_name("B.safetensors")
      ->required();
  grad->add_option("--passes", g->passes, "passes of the step")
      ->type_name("K")
      ->transform(IntIn(1, 64))
      ->capture_default_str();
  grad->add_option("--jitter", g->jitter, "overrides model.jitter")
      ->type_name("X")
      ->check(FiniteNumber());
  OneOf(grad->add_option("--mixin", g->prefix_mixin, "overrides model.prefix_mixin"),
        {{"on", 1}, {"off", 0}});
  grad->add_option("--seed", g->seed, "seed of the step's random draws")
      ->type_name("S")
      ->transform(IntIn(INT64_MIN))
      ->capture_default_str();
  OneOf(grad->add_option("--recompute", g->recompute, "activation recomputation"), kRecomputeNames)
      ->default_str(std::string(RecomputeName(g->recompute)));
  AddBackendOptions(*grad, &g->backend);
  grad->add_option("--out", g->out, "gradients to write")->type_name("G.safetensors")->required();

  return {app, [init, i, g] {
            const Status s = init->parsed() ? Init(*i) : Grad(*g);
            return s.ok() ? 0 : Fail(s);
          }};
}

}  // namespace fullband::cli
