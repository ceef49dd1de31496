#include "worker/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/logging.h"
#include "common/schedule.h"
#include "dataloader/reader.h"
#include "dataloader/token_store.h"
#include "ops/backend.h"
#include "worker/model.h"
#include "worker/optimizer.h"
#include "worker/token_file.h"

namespace fullband::worker {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Where a run's batches come from: the flat token file or the blended token stores.
class BatchSource {
 public:
  static StatusOr<std::unique_ptr<BatchSource>> Open(const Config& config) {
    const DataConfig& d = config.data;
    std::unique_ptr<BatchSource> src(new BatchSource);
    src->batch_ = d.batch_size;
    if (!d.path.empty()) {
      FB_ASSIGN_OR_RETURN(TokenFile file,
                          TokenFile::Open(d.path, config.model.vocab_size, d.seq_len));
      src->file_ = std::make_unique<TokenFile>(std::move(file));
      src->seed_ = static_cast<uint64_t>(d.seed);
      src->description_ = std::to_string(src->file_->num_tokens()) + " tokens of " + d.path;
      return src;
    }
    if (d.sources.empty()) {
      return InvalidArgumentError(
          "data: name the training data, either data.path (a token file) or data.sources "
          "(token stores written by `fullband ingest`)");
    }
    std::vector<int64_t> sizes;
    std::vector<double> weights;
    std::vector<const dataloader::TokenStore*> stores;
    int64_t sequences = 0;
    for (const DataSource& s : d.sources) {
      FB_ASSIGN_OR_RETURN(std::unique_ptr<dataloader::RocksDbTokenStore> store,
                          dataloader::RocksDbTokenStore::Open(s.store));
      if (store->num_sequences() == 0) {
        return FailedPreconditionError(s.store + ": the store holds no full sequence yet");
      }
      sizes.push_back(store->num_sequences());
      weights.push_back(s.weight);
      sequences += store->num_sequences();
      stores.push_back(store.get());
      src->stores_.push_back(std::move(store));
    }
    FB_ASSIGN_OR_RETURN(dataloader::Sampler sampler,
                        dataloader::Sampler::Create(sizes, weights, static_cast<uint64_t>(d.seed)));
    dataloader::ReaderOptions ro;
    ro.batch_size = d.batch_size;
    ro.seq_len = d.seq_len;
    ro.vocab_size = config.model.vocab_size;
    ro.prefetch = d.prefetch;
    const dataloader::SamplerCursor start = sampler.Start();
    FB_ASSIGN_OR_RETURN(src->reader_,
                        dataloader::BatchReader::Create(stores, std::move(sampler), start, ro));
    src->description_ = std::to_string(sequences) + " sequences in " +
                        std::to_string(d.sources.size()) + " token store(s)";
    return src;
  }

  // The batch of `step` into tokens (B, T + 1). Steps are read in order from 0.
  Status Read(int64_t step, int32_t* tokens) {
    if (file_) {
      file_->ReadBatch(seed_, step * batch_, batch_, tokens);
      return OkStatus();
    }
    FB_ASSIGN_OR_RETURN(dataloader::Batch batch, reader_->Next());
    std::copy(batch.tokens.begin(), batch.tokens.end(), tokens);
    return OkStatus();
  }
  const std::string& description() const { return description_; }

 private:
  BatchSource() = default;
  int64_t batch_ = 0;
  uint64_t seed_ = 0;
  std::unique_ptr<TokenFile> file_;
  std::vector<std::unique_ptr<dataloader::RocksDbTokenStore>> stores_;
  std::unique_ptr<dataloader::BatchReader> reader_;  // reads stores_: declared after them
  std::string description_;
};

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
  const ModelConfig& m = config.model;
  const int64_t b = config.data.batch_size, t = config.data.seq_len;
  FB_ASSIGN_OR_RETURN(std::unique_ptr<BatchSource> data, BatchSource::Open(config));
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
               << backend->name() << ": " << data->description() << ", sequences of " << t + 1
               << ", batch " << b << ", " << config.schedule.steps << " steps, up to "
               << shape.max_passes << " passes, recompute " << RecomputeName(shape.recompute)
               << ", activations " << model->activation_bytes() / (1 << 20) << " MiB, MFU peak "
               << summary.peak_gflops << " GFLOP/s";

  std::vector<int32_t> tokens(b * (t + 1));
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < config.schedule.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t passes = PassesForStep(config.schedule, step);
    FB_RETURN_IF_ERROR(data->Read(step, tokens.data()));
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
