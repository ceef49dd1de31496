// Trainer: the training loop of one rank — step source → its slice of the batch → K-pass step
// → data-parallel gradient reduction → clip → AdamW — with per-step accounting of tokens,
// token-equivalents (tokens × passes), throughput and MFU. The same loop serves `fullband
// train` (LocalStepSource, one rank or an mpirun group) and `fullband worker` (the
// coordinator's steps); docs/PARALLEL.md describes the layouts.
//
// Every step is StepPlan's (common/step_plan.h): its pass count, its global batch (sequences
// [s·B, (s + 1)·B) of the sampler's order, rank r of dp taking the contiguous slice of B/dp)
// and its seed, which fixes the jitter and mixin draws of every row wherever it runs (Note
// [Step draws] in model/model.h). Losses are means over the global batch's targets.
//
// Threading: one thread per rank drives the trainer; all ranks of the communicator call Run
// together.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/process_groups.h"
#include "common/config.h"
#include "common/status.h"
#include "common/step_plan.h"
#include "model/distributed_optimizer.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "ops/arena.h"
#include "ops/backend.h"
#include "worker/batch_source.h"
#include "worker/checkpointer.h"
#include "worker/data_parallel.h"
#include "worker/step_source.h"

namespace fullband::worker {

struct StepRecord {
  int64_t step = 0;         // 0-based
  int64_t total_steps = 0;  // of the whole run or job (the step source's)
  int64_t passes = 1;
  std::vector<double> pass_loss;  // global means
  double total_loss = 0;
  double grad_norm = 0;
  double lr = 0;
  int64_t tokens = 0;             // cumulative input tokens (global batch), from step 0
  int64_t token_equivalents = 0;  // cumulative tokens × passes
  double step_seconds = 0;
  double tokens_per_s = 0;              // this step's global tokens / its wall time
  double model_flops = 0;               // this step's model FLOPs (global)
  double mfu = 0;                       // model FLOPs / time / (peak × ranks)
  double comm_exposed_seconds = 0;      // waiting for the gradient reduction after backward
  double comm_hidden_fraction = 0;      // of the gradient bytes, reduced before backward ended
  double checkpoint_stall_seconds = 0;  // the snapshot of a checkpoint after this step (0: none)
};

struct TrainSummary {
  int64_t steps = 0;  // steps run by this run
  int64_t tokens = 0;
  int64_t token_equivalents = 0;
  double seconds = 0;
  double peak_gflops = 0;
  std::vector<double> first_pass_loss;  // per pass count k (index k-1): first logged loss
  std::vector<double> last_pass_loss;   // ... and the last
  std::string stop_reason;              // the step source's: "" when the budget was spent
};

// The backend that runtime.device and runtime.threads ask for, with the rest of `options` (the
// CPU kernels' instruction set, the CUDA plugin) as the process was told.
StatusOr<std::unique_ptr<ops::Backend>> CreateRuntimeBackend(const RuntimeConfig& runtime,
                                                             ops::BackendOptions options = {});

class Trainer {
 public:
  // Builds the model and optimizer for `config` (validated) on `backend`, with `comm` the whole
  // group (size tp × dp; on CUDA the groups' device buffers go over NCCL communicators that
  // Create makes over the same ranks: ops/nccl_communicator.h). Parameters are initialized
  // (runtime.init_seed) or loaded (runtime.init_from) identically on every rank. Checkpoints are
  // saved under `checkpoint_root` ("" = none) as config.checkpoint says. `backend` and `comm`
  // outlive the trainer.
  static StatusOr<std::unique_ptr<Trainer>> Create(const Config& config, ops::Backend* backend,
                                                   comm::Communicator* comm,
                                                   const std::string& checkpoint_root = "");

  // Restores the checkpoint `path` (a step-<N> directory) on every rank, so that the next step
  // run is its step N. When it cannot be read (a missing, truncated or corrupt file, on any
  // rank) it falls back to the newest complete checkpoint before it in the same root, and logs
  // which; with `scratch_last`, to step 0 (the initial state) when none loads. Errors:
  // INVALID_ARGUMENT for a checkpoint of another model or data stream; DATA_LOSS / NOT_FOUND
  // when no checkpoint at or before `path` loads (and not scratch_last).
  struct Restored {
    checkpoint::TrainingState state;  // step 0 and nothing else: from scratch
    std::string path;                 // what was loaded ("" from scratch)
    std::string fallback_reason;      // why `path` is not the one asked for ("" when it is)
  };
  StatusOr<Restored> Restore(const std::string& path, bool scratch_last = false);

  // Runs the steps of `steps` until it ends, saving checkpoints on the way (and at the end,
  // when the run ends because every step ran). `on_step` (optional) sees every step's record, on
  // every rank. Errors: the batch source's (a corrupt record is DATA_LOSS naming it), the step
  // source's, the communicator's (DEADLINE_EXCEEDED: a peer is gone), INTERNAL for a loss that
  // is not finite.
  StatusOr<TrainSummary> Run(StepSource& steps, BatchSource& batches,
                             const std::function<void(const StepRecord&)>& on_step);

  // Writes the parameters to runtime.save_to when set (rank 0 only).
  Status SaveIfAsked() const;

  model::Model& model() { return *model_; }
  model::AdamW& optimizer() { return optimizer_->adamw(); }
  const comm::Layout& layout() const { return groups_->layout(); }
  const StepPlan& plan() const { return *plan_; }
  // What this rank handed to the collectives of all its groups (world, TP and DP).
  comm::Communicator::Traffic traffic() const { return groups_->traffic(); }

 private:
  Trainer(const Config& config, ops::Backend* backend, comm::Communicator* comm)
      : config_(config), backend_(backend), comm_(comm) {}
  // One step of this rank; fills everything of `rec` but the cumulative counts.
  Status RunStep(const StepAssignment& a, StepSource& steps, BatchSource& batches, StepRecord& rec);
  // The training state after steps [0, steps_done).
  checkpoint::TrainingState State(int64_t steps_done, int64_t total_steps,
                                  const BatchSource& batches) const;
  // Restore of one checkpoint, agreed by every rank: OK only if it loaded everywhere.
  StatusOr<checkpoint::TrainingState> RestoreOnAllRanks(const std::string& path);

  Config config_;
  ops::Backend* backend_;
  comm::Communicator* comm_;                      // the world
  std::unique_ptr<comm::ParallelGroups> groups_;  // the TP and DP groups cut from it
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<model::DistributedOptimizer> optimizer_;
  std::unique_ptr<GradientReducer> reducer_;  // with dp > 1, unless the optimizer reduces
  std::unique_ptr<Checkpointer> checkpointer_;
  std::optional<StepPlan> plan_;
  // The ledger of the steps before this run (those of the restored checkpoint).
  int64_t base_tokens_ = 0, base_token_equivalents_ = 0;
  std::vector<int32_t> tokens_;
  double peak_gflops_ = 0;
  double flops_per_token_ = 0;
};

// `fullband train`: the run of `config` on this process's backend with the local step plan,
// over `comm` (one rank, or an mpirun group laid out by config.parallel), from step 0 or, with
// `resume` set, from that checkpoint (a step-<N> directory, or a root whose newest complete
// checkpoint is taken). Checkpoints go to config.checkpoint.dir (none when it is ""). The backend:
// CreateRuntimeBackend(config.runtime, backend).
StatusOr<TrainSummary> TrainLocal(const Config& config, comm::Communicator* comm,
                                  const std::function<void(const StepRecord&)>& on_step,
                                  const std::string& resume = "",
                                  const ops::BackendOptions& backend = {});

}  // namespace fullband::worker
