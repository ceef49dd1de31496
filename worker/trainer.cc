#include "worker/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "checkpoint/sharded.h"
#include "common/logging.h"
#include "common/model_params.h"
#include "common/schedule.h"
#include "common/step_plan.h"
#include "model/distributed_optimizer.h"
#include "ops/backend.h"
#include "ops/nccl_communicator.h"

namespace fullband::worker {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Bucket size of the data-parallel gradient all-reduce (Note [Gradient buckets]).
constexpr int64_t kBucketBytes = int64_t{4} << 20;

// On CUDA, NCCL communicators over the groups' ranks carry the backend's buffers; on the CPU the
// host groups do.
comm::DeviceGroupFactory DeviceGroups(ops::Backend* backend) {
  if (backend->device() != ops::Device::kCuda) return {};
  return
      [backend](comm::Communicator& host) { return ops::CreateNcclCommunicator(host, *backend); };
}

}  // namespace

StatusOr<std::unique_ptr<ops::Backend>> CreateRuntimeBackend(const RuntimeConfig& runtime,
                                                             ops::BackendOptions options) {
  options.device = runtime.device == "cuda" ? ops::Device::kCuda : ops::Device::kCpu;
  options.num_threads = static_cast<int>(runtime.threads);
  return ops::CreateBackend(options);
}

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const Config& config, ops::Backend* backend,
                                                   comm::Communicator* comm,
                                                   const std::string& checkpoint_root) {
  FB_RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<Trainer> t(new Trainer(config, backend, comm));
  FB_ASSIGN_OR_RETURN(StepPlan plan, StepPlan::Create(config));
  t->plan_.emplace(std::move(plan));
  FB_ASSIGN_OR_RETURN(const comm::Layout layout,
                      comm::MakeLayout(config.parallel, comm->size(), comm->rank()));
  if (layout.tp > 1 && !config.runtime.save_to.empty()) {
    return InvalidArgumentError(
        "runtime.save_to: a tensor-parallel run holds the model in shares; save a checkpoint "
        "(checkpoint.dir) and write the whole model with `fullband ckpt export`");
  }
  FB_ASSIGN_OR_RETURN(t->groups_,
                      comm::ParallelGroups::Create(comm, layout, DeviceGroups(backend)));
  const comm::ParallelGroups& g = *t->groups_;
  const int64_t rows = config.data.batch_size / layout.dp;
  const bool zero1 = config.parallel.zero1;
  model::ModelShape shape;
  shape.max_batch = rows;
  shape.max_seq = config.data.seq_len;
  shape.max_passes = static_cast<int>(config.schedule.MaxPasses());
  shape.recompute = config.runtime.recompute;
  shape.param_multiple = model::DistributedOptimizer::ParamMultiple(zero1, layout.dp);
  FB_ASSIGN_OR_RETURN(t->model_,
                      model::Model::Create(config.model, shape, backend, g.tp(), g.tp_device()));
  if (config.runtime.init_from.empty()) {
    t->model_->InitParameters(static_cast<uint64_t>(config.runtime.init_seed));
  } else {
    FB_RETURN_IF_ERROR(t->model_->LoadParameters(config.runtime.init_from));
  }
  const model::DistributedOptimizer::Groups og{
      .world = comm, .tp = g.tp(), .dp_device = g.dp_device()};
  FB_ASSIGN_OR_RETURN(
      t->optimizer_, model::DistributedOptimizer::Create(config.optim, zero1, t->model_.get(), og));
  if (layout.dp > 1 && !t->optimizer_->reduces_gradients()) {
    t->reducer_ = std::make_unique<GradientReducer>(t->model_->table(), t->model_->grads().f32(),
                                                    g.dp_device(), kBucketBytes);
  }
  Checkpointer::Options co;
  co.root = checkpoint_root;
  co.every_steps = config.checkpoint.every_steps;
  co.keep = config.checkpoint.keep;
  FB_ASSIGN_OR_RETURN(t->checkpointer_,
                      Checkpointer::Create(co, t->model_.get(), &t->optimizer_->adamw(), comm,
                                           layout.dp_rank, layout.dp));
  t->tokens_.resize(rows * (config.data.seq_len + 1));
  t->peak_gflops_ = config.runtime.peak_gflops > 0 ? config.runtime.peak_gflops
                                                   : ops::MeasurePeakGflops(*backend);
  t->flops_per_token_ =
      ModelFlopsPerToken(config.model, ModelParameterCount(config.model), config.data.seq_len);
  return t;
}

Status Trainer::RunStep(const StepAssignment& a, StepSource& steps, BatchSource& batches,
                        StepRecord& rec) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t rows = batches.rows(), t = config_.data.seq_len;
  FB_RETURN_IF_ERROR(batches.Read(a, tokens_.data()));
  // The global count of targets, which every mean of the step is taken over.
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 1; i <= t; ++i) counted += tokens_[r * (t + 1) + i] != config_.model.ignore_id;
  }
  FB_RETURN_IF_ERROR(
      groups_->dp()->AllReduce(&counted, 1, comm::CommType::kI64, comm::ReduceOp::kSum));

  model::StepOptions options;
  options.passes = static_cast<int>(a.passes);
  options.jitter = config_.model.jitter;
  options.prefix_mixin = config_.model.prefix_mixin;
  options.seed = a.seed;
  options.row_offset = layout().dp_rank * rows;
  options.loss_count = counted;
  if (reducer_) {
    reducer_->BeginStep();
    options.grads_final = [this](int64_t begin, int64_t end) { reducer_->MarkFinal(begin, end); };
  }
  model_->ZeroGradients();
  FB_ASSIGN_OR_RETURN(model::StepResult r, model_->Step(tokens_.data(), rows, t, options));
  if (reducer_) {
    FB_RETURN_IF_ERROR(reducer_->Finish(groups_->dp()->timeout()));
    rec.comm_exposed_seconds = reducer_->exposed_seconds();
    rec.comm_hidden_fraction = reducer_->hidden_fraction();
  }
  // Each data-parallel rank's losses are its share of the global means: their sum over the
  // ranks is the mean (the ranks of a tensor-parallel group hold the same values).
  std::vector<double> losses = r.pass_loss;
  losses.push_back(r.total);
  FB_RETURN_IF_ERROR(groups_->dp()->AllReduce(losses.data(), static_cast<int64_t>(losses.size()),
                                              comm::CommType::kF64, comm::ReduceOp::kSum));
  FB_ASSIGN_OR_RETURN(const model::OptimizerStats os,
                      optimizer_->Step(a.step, steps.total_steps()));
  backend_->Synchronize();
  rec.total_loss = losses.back();
  losses.pop_back();
  if (!std::isfinite(rec.total_loss)) {
    return InternalError("loss became " + std::to_string(rec.total_loss) + " at step " +
                         std::to_string(a.step));
  }
  rec.step = a.step;
  rec.total_steps = steps.total_steps();
  rec.passes = a.passes;
  rec.pass_loss = losses;
  rec.grad_norm = os.grad_norm;
  rec.lr = os.lr;
  rec.step_seconds = Seconds(t0);
  rec.tokens_per_s = static_cast<double>(a.tokens) / rec.step_seconds;
  rec.model_flops = flops_per_token_ * static_cast<double>(a.tokens * a.passes);
  rec.mfu = rec.model_flops / rec.step_seconds / (peak_gflops_ * 1e9 * comm_->size());
  return steps.Done(a, rec.pass_loss, rec.step_seconds);
}

StatusOr<TrainSummary> Trainer::Run(StepSource& steps, BatchSource& batches,
                                    const std::function<void(const StepRecord&)>& on_step) {
  TrainSummary summary;
  summary.peak_gflops = peak_gflops_;
  const auto start = std::chrono::steady_clock::now();
  const Checkpointer::CommitFn commit = [&steps](int64_t step, const std::string& path,
                                                 int64_t shards) {
    FB_LOG(INFO) << "checkpoint of step " << step << " committed: " << path;
    return steps.Commit(step, path, shards);
  };
  while (true) {
    FB_ASSIGN_OR_RETURN(std::optional<StepAssignment> a, steps.Next());
    if (!a.has_value()) break;
    StepRecord rec;
    FB_RETURN_IF_ERROR(RunStep(*a, steps, batches, rec));
    summary.tokens += a->tokens;
    summary.token_equivalents += a->tokens * a->passes;
    rec.tokens = base_tokens_ + summary.tokens;
    rec.token_equivalents = base_token_equivalents_ + summary.token_equivalents;
    for (int64_t k = 0; k < a->passes; ++k) {
      if (static_cast<int64_t>(summary.first_pass_loss.size()) <= k) {
        summary.first_pass_loss.resize(k + 1, NAN);
        summary.last_pass_loss.resize(k + 1, NAN);
      }
      if (std::isnan(summary.first_pass_loss[k])) summary.first_pass_loss[k] = rec.pass_loss[k];
      summary.last_pass_loss[k] = rec.pass_loss[k];
    }
    ++summary.steps;
    FB_RETURN_IF_ERROR(checkpointer_->Poll(/*wait=*/false, commit));
    if (checkpointer_->Due(a->step + 1, steps.total_steps())) {
      checkpoint::TrainingState state = State(a->step + 1, steps.total_steps(), batches);
      state.tokens = base_tokens_ + summary.tokens;
      state.token_equivalents = base_token_equivalents_ + summary.token_equivalents;
      FB_RETURN_IF_ERROR(checkpointer_->Save(state, commit));
      rec.checkpoint_stall_seconds = checkpointer_->last_stall_seconds();
    }
    if (on_step) on_step(rec);
  }
  summary.stop_reason = steps.stop_reason();
  if (summary.stop_reason.empty()) {
    FB_RETURN_IF_ERROR(checkpointer_->Poll(/*wait=*/true, commit));
  } else {
    checkpointer_->Abandon();  // the job is over or restarting: its commit would be refused
  }
  summary.seconds = Seconds(start);
  return summary;
}

checkpoint::TrainingState Trainer::State(int64_t steps_done, int64_t total_steps,
                                         const BatchSource& batches) const {
  checkpoint::TrainingState s;
  s.step = steps_done;
  s.total_steps = total_steps;
  const bool more = steps_done < plan_->total_steps();
  s.next_passes = more ? plan_->Passes(steps_done) : 0;
  s.next_step_seed = more ? plan_->Assign(steps_done).seed : 0;
  s.optimizer_step = steps_done;
  s.data_seed = static_cast<uint64_t>(config_.data.seed);
  s.sampler_draws = batches.cursor().draws;
  for (size_t i = 0; i < batches.cursor().consumed.size(); ++i) {
    s.sources.push_back({config_.data.sources.at(i).store, batches.cursor().consumed[i]});
  }
  s.tokenizer_hash = batches.tokenizer_hash();
  s.config_yaml = ConfigToYaml(config_);
  s.tp = layout().tp;
  s.dp = layout().dp;
  s.zero1 = config_.parallel.zero1;
  return s;
}

StatusOr<checkpoint::TrainingState> Trainer::RestoreOnAllRanks(const std::string& path) {
  StatusOr<checkpoint::TrainingState> mine = checkpointer_->Restore(path);
  if (mine.ok() && static_cast<uint64_t>(config_.data.seed) != mine->data_seed) {
    mine = InvalidArgumentError("checkpoint " + path + " was written with data.seed " +
                                std::to_string(mine->data_seed) + ", this config has " +
                                std::to_string(config_.data.seed));
  }
  // Every rank takes the same way on: the error of the lowest rank that failed, if any.
  int64_t key = mine.ok() ? 0 : comm_->size() - comm_->rank();  // the max is that rank's
  FB_RETURN_IF_ERROR(comm_->AllReduce(&key, 1, comm::CommType::kI64, comm::ReduceOp::kMax));
  if (key == 0) return mine;
  const int failed = comm_->size() - static_cast<int>(key);
  const StatusOr<std::string> error = comm::BroadcastResult(
      *comm_, failed,
      comm_->rank() == failed ? StatusOr<std::string>(mine.status()) : StatusOr<std::string>(""),
      comm_->timeout());
  if (error.ok()) return InternalError("checkpoint " + path + ": rank errors disagree");
  if (comm_->size() == 1) return error.status();
  return Status(error.status().code(),
                "rank " + std::to_string(failed) + ": " + error.status().message());
}

StatusOr<Trainer::Restored> Trainer::Restore(const std::string& path, bool scratch_last) {
  Restored r;
  r.path = path;
  while (true) {
    StatusOr<checkpoint::TrainingState> s = RestoreOnAllRanks(r.path);
    if (s.ok()) {
      r.state = *s;
      base_tokens_ = s->tokens;
      base_token_equivalents_ = s->token_equivalents;
      return r;
    }
    const StatusCode c = s.status().code();
    if (c != StatusCode::kDataLoss && c != StatusCode::kNotFound) return s.status();
    if (r.fallback_reason.empty()) r.fallback_reason = s.status().ToString();
    // Fall back to the newest complete checkpoint before it in the same root.
    const std::filesystem::path at(r.path);
    const int64_t failed_step = checkpoint::ParseStepDirName(at.filename().string());
    StatusOr<std::vector<checkpoint::CheckpointEntry>> all =
        checkpoint::ListCheckpoints(at.parent_path().string());
    std::string previous;
    for (const checkpoint::CheckpointEntry& e :
         all.ok() ? *all : std::vector<checkpoint::CheckpointEntry>()) {
      if (e.complete && e.step < failed_step) previous = e.path;
    }
    if (previous.empty() && !scratch_last) return s.status();
    if (comm_->rank() == 0) {
      FB_LOG(WARNING) << "checkpoint " << r.path << " is unusable (" << s.status().ToString()
                      << "); falling back to "
                      << (previous.empty() ? "step 0 (no earlier checkpoint)" : previous);
    }
    if (previous.empty()) {  // nothing was touched: the model is as Create initialized it
      r.state = checkpoint::TrainingState();
      r.path.clear();
      return r;
    }
    r.path = previous;
  }
}

Status Trainer::SaveIfAsked() const {
  if (config_.runtime.save_to.empty() || comm_->rank() != 0) return OkStatus();
  return model_->SaveParameters(config_.runtime.save_to);
}

namespace {

// `path` itself when it holds a manifest, else the newest complete checkpoint under it.
StatusOr<std::string> ResolveCheckpoint(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(path) / checkpoint::kManifestName, ec)) {
    return path;
  }
  StatusOr<std::vector<checkpoint::CheckpointEntry>> all = checkpoint::ListCheckpoints(path);
  if (!all.ok()) return NotFoundError("--resume " + path + ": " + all.status().message());
  for (auto it = all->rbegin(); it != all->rend(); ++it) {
    if (it->complete) return it->path;
  }
  return NotFoundError("--resume " + path +
                       ": neither a checkpoint (no manifest.json) nor a directory holding a "
                       "complete one");
}

}  // namespace

StatusOr<TrainSummary> TrainLocal(const Config& config, comm::Communicator* comm,
                                  const std::function<void(const StepRecord&)>& on_step,
                                  const std::string& resume,
                                  const ops::BackendOptions& backend_options) {
  FB_RETURN_IF_ERROR(config.Validate());
  FB_ASSIGN_OR_RETURN(std::unique_ptr<ops::Backend> backend,
                      CreateRuntimeBackend(config.runtime, backend_options));
  FB_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer,
                      Trainer::Create(config, backend.get(), comm, config.checkpoint.dir));
  const StepPlan& plan = trainer->plan();
  const comm::Layout& layout = trainer->layout();
  int64_t first_step = 0;
  std::optional<dataloader::SamplerCursor> cursor;
  if (!resume.empty()) {
    FB_ASSIGN_OR_RETURN(const std::string path, ResolveCheckpoint(resume));
    FB_ASSIGN_OR_RETURN(const Trainer::Restored restored, trainer->Restore(path));
    const checkpoint::TrainingState& state = restored.state;
    first_step = state.step;
    cursor.emplace();
    cursor->draws = state.sampler_draws;
    for (const checkpoint::SourceCursor& c : state.sources) cursor->consumed.push_back(c.consumed);
    if (comm->rank() == 0) {
      FB_LOG(INFO) << "resuming at step " << first_step << " from " << restored.path
                   << " (written at tp " << state.tp << " × dp " << state.dp
                   << (state.zero1 ? ", ZeRO-1" : "") << ")";
    }
  }
  FB_ASSIGN_OR_RETURN(std::unique_ptr<BatchSource> data,
                      BatchSource::Open(config, layout.dp_rank, layout.dp, first_step,
                                        cursor ? &*cursor : nullptr));
  const model::Model& m = trainer->model();
  if (comm->rank() == 0) {
    FB_LOG(INFO) << "training " << ModelParameterCount(config.model) << " parameters on "
                 << backend->name() << " × " << comm->size() << " rank(s) (dp " << layout.dp
                 << "): " << data->description() << ", sequences of " << config.data.seq_len + 1
                 << ", global batch " << config.data.batch_size << ", " << plan.total_steps()
                 << " steps, up to " << config.schedule.MaxPasses() << " passes, recompute "
                 << RecomputeName(config.runtime.recompute) << ", activations "
                 << m.activation_bytes() / (1 << 20) << " MiB";
  }
  LocalStepSource steps(plan, first_step);
  FB_ASSIGN_OR_RETURN(TrainSummary summary, trainer->Run(steps, *data, on_step));
  FB_RETURN_IF_ERROR(trainer->SaveIfAsked());
  return summary;
}

}  // namespace fullband::worker
