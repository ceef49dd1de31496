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
#include "ops/backend.h"
#include "worker/layers.h"
#include "worker/nccl_communicator.h"

namespace fullband::worker {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Bucket size of the data-parallel gradient all-reduce (Note [Gradient buckets]).
constexpr int64_t kBucketBytes = int64_t{4} << 20;

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

StatusOr<std::unique_ptr<ops::Backend>> CreateRuntimeBackend(const RuntimeConfig& runtime,
                                                             ops::BackendOptions options) {
  options.device = runtime.device == "cuda" ? ops::Device::kCuda : ops::Device::kCpu;
  options.num_threads = static_cast<int>(runtime.threads);
  return ops::CreateBackend(options);
}

StatusOr<Layout> MakeLayout(const ParallelConfig& parallel, int world_size, int rank) {
  if (parallel.tp * parallel.dp != world_size) {
    return InvalidArgumentError("parallel: tp × dp = " + std::to_string(parallel.tp) + " × " +
                                std::to_string(parallel.dp) + " does not match the " +
                                std::to_string(world_size) + " rank(s) this run was started with");
  }
  Layout l;
  l.tp = static_cast<int>(parallel.tp);
  l.dp = static_cast<int>(parallel.dp);
  l.tp_rank = rank % l.tp;  // a TP group is consecutive ranks
  l.dp_rank = rank / l.tp;
  return l;
}

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const Config& config, ops::Backend* backend,
                                                   Communicator* comm,
                                                   const std::string& checkpoint_root) {
  FB_RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<Trainer> t(new Trainer(config, backend, comm));
  FB_ASSIGN_OR_RETURN(StepPlan plan, StepPlan::Create(config));
  t->plan_.emplace(std::move(plan));
  FB_ASSIGN_OR_RETURN(t->layout_, MakeLayout(config.parallel, comm->size(), comm->rank()));
  const Layout& layout = t->layout_;
  if (layout.tp > 1 && !config.runtime.save_to.empty()) {
    return InvalidArgumentError(
        "runtime.save_to: a tensor-parallel run holds the model in shares; save a checkpoint "
        "(checkpoint.dir) and write the whole model with `fullband ckpt export`");
  }
  FB_RETURN_IF_ERROR(t->ConnectGroups());
  const int64_t rows = config.data.batch_size / t->layout_.dp;
  ModelShape shape;
  shape.max_batch = rows;
  shape.max_seq = config.data.seq_len;
  shape.max_passes = static_cast<int>(config.schedule.MaxPasses());
  shape.recompute = config.runtime.recompute;
  const bool zero1 = config.parallel.zero1;
  if (zero1) shape.param_multiple = 16 * t->layout_.dp;  // equal, aligned shards
  FB_ASSIGN_OR_RETURN(t->model_,
                      Model::Create(config.model, shape, backend, t->tp_, t->tp_device_));
  if (config.runtime.init_from.empty()) {
    t->model_->InitParameters(static_cast<uint64_t>(config.runtime.init_seed));
  } else {
    FB_RETURN_IF_ERROR(t->model_->LoadParameters(config.runtime.init_from));
  }
  if (zero1) {
    t->shard_floats_ = t->model_->params().numel() / t->layout_.dp;
    t->shard_begin_ = t->layout_.dp_rank * t->shard_floats_;
    FB_ASSIGN_OR_RETURN(
        ops::Arena arena,
        ops::Arena::Create(backend, 2 * static_cast<size_t>(t->shard_floats_) * sizeof(float)));
    t->shard_arena_.emplace(std::move(arena));
    t->grad_shard_ = t->shard_arena_->TakeF32({t->shard_floats_});
    t->param_shard_ = t->shard_arena_->TakeF32({t->shard_floats_});
  }
  FB_ASSIGN_OR_RETURN(t->optimizer_,
                      zero1 ? AdamW::Create(config.optim, t->model_->table(), backend,
                                            t->shard_begin_, t->shard_begin_ + t->shard_floats_)
                            : AdamW::Create(config.optim, t->model_->table(), backend));
  if (t->layout_.dp > 1 && !zero1) {
    t->reducer_ = std::make_unique<GradientReducer>(t->model_->table(), t->model_->grads().f32(),
                                                    t->dp_device_, kBucketBytes);
  }
  Checkpointer::Options co;
  co.root = checkpoint_root;
  co.every_steps = config.checkpoint.every_steps;
  co.keep = config.checkpoint.keep;
  FB_ASSIGN_OR_RETURN(t->checkpointer_,
                      Checkpointer::Create(co, t->model_.get(), t->optimizer_.get(), comm,
                                           t->layout_.dp_rank, t->layout_.dp));
  t->tokens_.resize(rows * (config.data.seq_len + 1));
  t->peak_gflops_ =
      config.runtime.peak_gflops > 0 ? config.runtime.peak_gflops : MeasurePeakGflops(*backend);
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
  FB_RETURN_IF_ERROR(dp_->AllReduce(&counted, 1, CommType::kI64, ReduceOp::kSum));

  StepOptions options;
  options.passes = static_cast<int>(a.passes);
  options.jitter = config_.model.jitter;
  options.prefix_mixin = config_.model.prefix_mixin;
  options.seed = a.seed;
  options.row_offset = layout_.dp_rank * rows;
  options.loss_count = counted;
  if (reducer_) {
    reducer_->BeginStep();
    options.grads_final = [this](int64_t begin, int64_t end) { reducer_->MarkFinal(begin, end); };
  }
  model_->ZeroGradients();
  FB_ASSIGN_OR_RETURN(StepResult r, model_->Step(tokens_.data(), rows, t, options));
  if (reducer_) {
    FB_RETURN_IF_ERROR(reducer_->Finish(dp_->timeout()));
    rec.comm_exposed_seconds = reducer_->exposed_seconds();
    rec.comm_hidden_fraction = reducer_->hidden_fraction();
  }
  // Each data-parallel rank's losses are its share of the global means: their sum over the
  // ranks is the mean (the ranks of a tensor-parallel group hold the same values).
  std::vector<double> losses = r.pass_loss;
  losses.push_back(r.total);
  FB_RETURN_IF_ERROR(dp_->AllReduce(losses.data(), static_cast<int64_t>(losses.size()),
                                    CommType::kF64, ReduceOp::kSum));
  OptimizerStats os;
  if (config_.parallel.zero1) {
    FB_ASSIGN_OR_RETURN(os, ShardedUpdate(a.step, steps.total_steps()));
  } else if (tp_ != nullptr) {  // the norm over the group's shares (replicated ones once)
    double squares = GradSquares(model_->grads(), 0);
    FB_RETURN_IF_ERROR(tp_->AllReduce(&squares, 1, CommType::kF64, ReduceOp::kSum));
    os = optimizer_->StepRange(model_->params(), model_->grads(), a.step, steps.total_steps(),
                               std::sqrt(squares));
  } else {
    os = optimizer_->Step(model_->params(), model_->grads(), a.step, steps.total_steps());
  }
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

// Note [ZeRO-1]: every rank holds all parameters but the AdamW moments of one shard only, the
// dp-th part [dp_rank·S, (dp_rank + 1)·S) of the (padded) arena. After backward the gradients
// are reduce-scattered (each rank gets the summed gradients of its shard), the global norm is
// the all-reduced sum of the shards' squares, each rank updates its shard, and the parameters
// are all-gathered. Sums combine ranks in the same order as the all-reduce without ZeRO-1.
StatusOr<OptimizerStats> Trainer::ShardedUpdate(int64_t step, int64_t total_steps) {
  const int64_t s = shard_floats_;
  FB_RETURN_IF_ERROR(dp_device_->ReduceScatter(model_->grads().f32(), grad_shard_.f32(), s,
                                               CommType::kF32, ReduceOp::kSum));
  // Every rank of the world holds another part of the gradients (its TP share, its DP shard).
  double squares = GradSquares(grad_shard_, shard_begin_);
  FB_RETURN_IF_ERROR(comm_->AllReduce(&squares, 1, CommType::kF64, ReduceOp::kSum));
  const ops::Tensor params =
      ops::Tensor::F32(model_->params().f32() + shard_begin_, {s}, backend_->device());
  const OptimizerStats os =
      optimizer_->StepRange(params, grad_shard_, step, total_steps, std::sqrt(squares));
  CopyTensor(*backend_, param_shard_, params);
  FB_RETURN_IF_ERROR(
      dp_device_->AllGather(param_shard_.f32(), model_->params().f32(), s, CommType::kF32));
  return os;
}

// The TP and DP groups of docs/PARALLEL.md ("The layout"), cut from the world when tp > 1 (a
// TP group is consecutive ranks). On CUDA, NCCL communicators over the same ranks carry the
// backend's buffers; the MPI groups keep the host values (losses, counts, norms, the readout's
// log-sum-exps).
Status Trainer::ConnectGroups() {
  if (layout_.tp > 1) {
    FB_ASSIGN_OR_RETURN(tp_owned_, comm_->Split(layout_.dp_rank, layout_.tp_rank));
    FB_ASSIGN_OR_RETURN(dp_owned_, comm_->Split(layout_.tp_rank, layout_.dp_rank));
    tp_ = tp_owned_.get();
    dp_ = dp_owned_.get();
  }
  tp_device_ = tp_;
  dp_device_ = dp_;
  if (backend_->device() != ops::Device::kCuda || comm_->size() == 1) return OkStatus();
  if (layout_.tp > 1) {
    FB_ASSIGN_OR_RETURN(tp_nccl_, CreateNcclCommunicator(*tp_, *backend_));
    tp_device_ = tp_nccl_.get();
  }
  if (layout_.dp > 1) {
    FB_ASSIGN_OR_RETURN(dp_nccl_, CreateNcclCommunicator(*dp_, *backend_));
    dp_device_ = dp_nccl_.get();
  }
  return OkStatus();
}

Communicator::Traffic Trainer::traffic() const {
  Communicator::Traffic sum = comm_->traffic();
  for (const Communicator* c : {tp_owned_.get(), dp_owned_.get(), tp_nccl_.get(), dp_nccl_.get()}) {
    if (c != nullptr) sum += c->traffic();
  }
  return sum;
}

// Under tensor parallelism a replicated parameter's gradient is the same on every rank of the
// group, so only TP rank 0 counts it; alone, the whole range at once.
double Trainer::GradSquares(ops::Tensor grads, int64_t begin) const {
  if (tp_ == nullptr) return backend_->SumSquares(grads);
  const int64_t end = begin + grads.numel();
  double squares = 0;
  for (const ParamSpec& spec : model_->table().specs()) {
    if (!model_->table().Owns(spec)) continue;
    const int64_t b = std::max(begin, spec.offset), e = std::min(end, spec.offset + spec.numel);
    if (b >= e) continue;
    squares += backend_->SumSquares(
        ops::Tensor::F32(grads.f32() + (b - begin), {e - b}, backend_->device()));
  }
  return squares;
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
  s.tp = layout_.tp;
  s.dp = layout_.dp;
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
  FB_RETURN_IF_ERROR(comm_->AllReduce(&key, 1, CommType::kI64, ReduceOp::kMax));
  if (key == 0) return mine;
  const int failed = comm_->size() - static_cast<int>(key);
  const StatusOr<std::string> error = BroadcastResult(
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

StatusOr<TrainSummary> TrainLocal(const Config& config, Communicator* comm,
                                  const std::function<void(const StepRecord&)>& on_step,
                                  const std::string& resume,
                                  const ops::BackendOptions& backend_options) {
  FB_RETURN_IF_ERROR(config.Validate());
  FB_ASSIGN_OR_RETURN(std::unique_ptr<ops::Backend> backend,
                      CreateRuntimeBackend(config.runtime, backend_options));
  FB_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer,
                      Trainer::Create(config, backend.get(), comm, config.checkpoint.dir));
  const StepPlan& plan = trainer->plan();
  const Layout& layout = trainer->layout();
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
  const Model& m = trainer->model();
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
