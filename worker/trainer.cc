#include "worker/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/logging.h"
#include "common/schedule.h"
#include "ops/backend.h"
#include "worker/model.h"
#include "worker/optimizer.h"
#include "worker/token_file.h"

namespace fullband::worker {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

double MeasurePeakGflops(ops::Backend& be) {
  const int64_t n = 2048;
  const size_t bytes = n * n * sizeof(float);
  void* a = be.Allocate(bytes).value();
  void* b = be.Allocate(bytes).value();
  void* c = be.Allocate(bytes).value();
  be.Fill(ops::Tensor::F32(static_cast<float*>(a), {n * n}, be.device()), 0.5f);
  be.Fill(ops::Tensor::F32(static_cast<float*>(b), {n * n}, be.device()), 0.25f);
  double best = 0;
  for (int i = 0; i < 4; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    be.Gemm(false, false, n, n, n, 1.0f, static_cast<float*>(a), n, static_cast<float*>(b), n, 0.0f,
            static_cast<float*>(c), n);
    be.Synchronize();
    if (i > 0) best = std::max(best, 2.0 * n * n * n / Seconds(t0) / 1e9);
  }
  be.Free(a);
  be.Free(b);
  be.Free(c);
  return best;
}

StatusOr<TrainSummary> Train(const Config& config,
                             const std::function<void(const StepRecord&)>& on_step) {
  FB_RETURN_IF_ERROR(config.Validate());
  if (config.data.path.empty()) {
    return InvalidArgumentError("data.path: the token file to train on is required");
  }
  const ModelConfig& m = config.model;
  const int64_t b = config.data.batch_size, t = config.data.seq_len;
  FB_ASSIGN_OR_RETURN(TokenFile data, TokenFile::Open(config.data.path, m.vocab_size, t));
  ops::BackendOptions bo;
  bo.device = config.runtime.device == "cuda" ? ops::Device::kCuda : ops::Device::kCpu;
  bo.num_threads = static_cast<int>(config.runtime.threads);
  FB_ASSIGN_OR_RETURN(std::unique_ptr<ops::Backend> backend, ops::CreateBackend(bo));
  ModelShape shape;
  shape.max_batch = b;
  shape.max_seq = t;
  shape.max_passes = static_cast<int>(config.schedule.MaxPasses());
  shape.recompute = config.runtime.recompute;
  FB_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Create(m, shape, backend.get()));
  if (config.runtime.init_from.empty()) {
    model->InitParameters(static_cast<uint64_t>(config.runtime.init_seed));
  } else {
    FB_RETURN_IF_ERROR(model->LoadParameters(config.runtime.init_from));
  }
  FB_ASSIGN_OR_RETURN(std::unique_ptr<AdamW> optimizer,
                      AdamW::Create(config.optim, model->table(), backend.get()));

  TrainSummary summary;
  summary.peak_gflops =
      config.runtime.peak_gflops > 0 ? config.runtime.peak_gflops : MeasurePeakGflops(*backend);
  const double flops_per_token = ModelFlopsPerToken(m, model->table().CountParameters(), t);
  FB_LOG(INFO) << "training " << model->table().CountParameters() << " parameters on "
               << backend->name() << ": " << data.num_tokens() << " tokens in "
               << data.num_sequences() << " sequences of " << t + 1 << ", batch " << b << ", "
               << config.schedule.steps << " steps, up to " << shape.max_passes
               << " passes, recompute " << RecomputeName(shape.recompute) << ", activations "
               << model->activation_bytes() / (1 << 20) << " MiB, MFU peak " << summary.peak_gflops
               << " GFLOP/s";

  std::vector<int32_t> tokens(b * (t + 1));
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < config.schedule.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t passes = PassesForStep(config.schedule, step);
    data.ReadBatch(static_cast<uint64_t>(config.data.seed), step * b, b, tokens.data());
    StepOptions options;
    options.passes = static_cast<int>(passes);
    options.jitter = m.jitter;
    options.prefix_mixin = m.prefix_mixin;
    options.seed = static_cast<uint64_t>(config.schedule.seed) * 0x9E3779B97F4A7C15ull +
                   static_cast<uint64_t>(step);
    model->ZeroGradients();
    FB_ASSIGN_OR_RETURN(StepResult r, model->Step(tokens.data(), b, t, options));
    const OptimizerStats os =
        optimizer->Step(model->params(), model->grads(), step, config.schedule.steps);
    backend->Synchronize();

    StepRecord rec;
    rec.step = step;
    rec.passes = passes;
    rec.pass_loss = r.pass_loss;
    rec.total_loss = r.total;
    rec.grad_norm = os.grad_norm;
    rec.lr = os.lr;
    summary.tokens += b * t;
    summary.token_equivalents += b * t * passes;
    rec.tokens = summary.tokens;
    rec.token_equivalents = summary.token_equivalents;
    rec.step_seconds = Seconds(t0);
    rec.tokens_per_s = static_cast<double>(b * t) / rec.step_seconds;
    rec.model_flops = flops_per_token * static_cast<double>(b * t * passes);
    rec.mfu = rec.model_flops / rec.step_seconds / (summary.peak_gflops * 1e9);
    if (!std::isfinite(r.total)) {
      return InternalError("loss became " + std::to_string(r.total) + " at step " +
                           std::to_string(step));
    }
    for (int64_t k = 0; k < passes; ++k) {
      if (static_cast<int64_t>(summary.first_pass_loss.size()) <= k) {
        summary.first_pass_loss.resize(k + 1, NAN);
        summary.last_pass_loss.resize(k + 1, NAN);
      }
      if (std::isnan(summary.first_pass_loss[k])) summary.first_pass_loss[k] = r.pass_loss[k];
      summary.last_pass_loss[k] = r.pass_loss[k];
    }
    summary.steps = step + 1;
    if (on_step) on_step(rec);
  }
  summary.seconds = Seconds(start);
  if (!config.runtime.save_to.empty()) {
    FB_RETURN_IF_ERROR(model->SaveParameters(config.runtime.save_to));
  }
  return summary;
}

}  // namespace fullband::worker
