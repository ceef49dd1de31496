// Config: the one configuration aggregate of fullband, loaded from YAML and validated.
//
// Every field has a comment and its default (docs/MODEL.md); the YAML keys are the field
// names, listed once in common/config_fields.h, which every reader and writer walks. Loading
// rejects unknown keys, wrong types and out-of-range values with an INVALID_ARGUMENT naming the
// field path and the value ("model.n_heads: 12 is not divisible by model.n_kv_heads = 5"). A Config
// is passed by const&, never global. Cross-section rules (parallel layout against the model,
// launcher ranks against the layout) are checked by Config::Validate.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace fullband {

enum class FeedbackLoss { kMean, kSum };  // total = ℓ1 + mean(ℓ2..K) | ℓ1 + ... + ℓK
enum class FeedbackState { kPostNorm, kPreNorm };  // h[k] after the final norm | before it

// Activation recomputation of the K-pass step (docs/MODEL.md, Note [Recomputation]).
enum class Recompute { kNone, kSelective, kFull };

std::string_view FeedbackLossName(FeedbackLoss v);
std::string_view FeedbackStateName(FeedbackState v);
std::string_view RecomputeName(Recompute v);

// The unit a job's compute budget is counted in (docs/DESIGN.md §1).
enum class BudgetKind { kTokens, kTokenEquivalents, kFlops };
std::string_view BudgetKindName(BudgetKind v);  // tokens | token_equivalents | flops

// How the coordinator starts a job's worker processes (coordinator/launcher.h).
enum class LauncherKind { kLocal, kSlurm };
std::string_view LauncherKindName(LauncherKind v);  // local | slurm

// The latent-feedback transformer (docs/MODEL.md); defaults are the paper's 1B model.
struct ModelConfig {
  int64_t vocab_size = 100352;       // V, padded Phi-4 vocabulary
  int64_t d_model = 1536;            // D
  int64_t n_layers = 24;             // L
  int64_t n_heads = 16;              // H, query heads
  int64_t n_kv_heads = 8;            // Hkv, key/value heads (GQA); divides H
  int64_t head_dim = 96;             // Dh, even (RoPE pairs (i, i + Dh/2))
  int64_t ffn_dim = 6656;            // F, SwiGLU hidden size
  int64_t max_seq_len = 8192;        // longest sequence the model is trained or run on
  double rope_theta = 10000;         // RoPE base
  bool qk_norm = true;               // per-head RMSNorm of q and k
  bool attn_gate = true;             // headwise sigmoid output gate
  int64_t window = 2048;             // W, sliding window of windowed layers; 0 = no window
  int64_t full_attention_every = 6;  // layer l is full when (l + 1) % this == 0; 0 = never
  bool depth_scaling = true;         // residual branches scaled by 1/sqrt(L)
  int64_t eod_id = 100257;           // <|endoftext|>: a segment starts after it
  int64_t ignore_id = -1;            // targets equal to this are not counted
  double z_loss = 1.0e-5;            // weight of mean(logsumexp²); 0 disables
  FeedbackLoss feedback_loss = FeedbackLoss::kMean;
  FeedbackState feedback_state = FeedbackState::kPostNorm;
  double jitter = 0.02;          // ξ ~ U(-jitter, jitter) added to h during training
  bool prefix_mixin = true;      // per segment and pass, a random plain prefix
  bool pass1_input_norm = true;  // pass 1 input is RMSNorm(e; norm_in) (false: e itself)

  // OK, or INVALID_ARGUMENT naming the first bad field as "model.<field>".
  Status Validate() const;
  // True when layer l (0-based) uses full attention rather than the window.
  bool IsFullAttentionLayer(int64_t layer) const;

  bool operator==(const ModelConfig&) const = default;
};

// One RocksDB token store (dataloader/FORMAT.md) and its share of the blend.
struct DataSource {
  std::string store;    // the store's directory, written by `fullband ingest`
  double weight = 1.0;  // relative sampling weight (> 0); weights are normalized over sources
  bool operator==(const DataSource&) const = default;
};

// Where the training tokens come from and how batches are shaped. Exactly one of `path` and
// `sources` names the data of a training run.
struct DataConfig {
  std::string path;                 // flat file of little-endian uint32 token ids
  std::vector<DataSource> sources;  // RocksDB token stores, blended by weight
  int64_t prefetch = 4;             // batches the store reader keeps ready ahead of the step
  int64_t batch_size = 8;           // B, sequences per step
  int64_t seq_len = 256;            // T, input tokens per sequence (each reads T + 1 tokens)
  int64_t seed = 0;                 // the sampler's permutation seed

  // (seq_len against model.max_seq_len is checked where the model is built.)
  Status Validate() const;
  bool operator==(const DataConfig&) const = default;
};

// AdamW with decoupled weight decay, global-norm clipping, warmup–stable–decay learning rate.
struct OptimConfig {
  double lr = 5.0e-4;  // peak learning rate
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1.0e-8;
  double weight_decay = 0.1;        // on matrices; see the two switches below
  bool decay_embedding = false;     // also decay the (tied) embedding
  bool decay_norms = false;         // also decay RMSNorm gains
  double grad_clip = 1.0;           // max global gradient norm; 0 disables
  int64_t warmup_steps = 200;       // linear warmup from 0 to lr
  double cooldown_fraction = 0.25;  // last fraction of the steps decays linearly to 0

  Status Validate() const;
  bool operator==(const OptimConfig&) const = default;
};

// One phase of the pass schedule: until `until` (a fraction of the budget in (0, 1]) steps
// draw their pass count from `mix` ({passes, probability}, probabilities summing to 1).
struct SchedulePhase {
  double until = 1.0;
  std::vector<std::pair<int64_t, double>> mix = {{1, 1.0}};
  bool operator==(const SchedulePhase&) const = default;
};

// How many passes each step runs (docs/DESIGN.md §1), drawn from a generator seeded by (seed, step)
// so that a restarted job gets the same pass counts for the same steps.
struct ScheduleConfig {
  int64_t steps = 1000;  // the budget of a single-process run, in steps
  int64_t seed = 0;
  std::vector<SchedulePhase> phases = {SchedulePhase{}};

  Status Validate() const;
  int64_t MaxPasses() const;
  bool operator==(const ScheduleConfig&) const = default;
};

// How this process runs.
struct RuntimeConfig {
  std::string device = "cpu";  // cpu | cuda
  int64_t threads = 0;         // CPU threads; 0 = all cores
  Recompute recompute = Recompute::kNone;
  int64_t log_every = 10;  // steps between log lines
  int64_t init_seed = 0;   // parameter initialization seed
  std::string init_from;   // safetensors weights to start from instead ("" = init)
  std::string save_to;     // safetensors weights written at the end ("" = none)
  double peak_gflops = 0;  // the MFU denominator; 0 = measure sgemm at start

  Status Validate() const;
  bool operator==(const RuntimeConfig&) const = default;
};

// The layout of a job's ranks: world = tp × dp (docs/DESIGN.md §4). tp must divide model.n_heads,
// model.n_kv_heads, model.ffn_dim and model.vocab_size (checked by Config::Validate).
struct ParallelConfig {
  int64_t tp = 1;      // tensor-parallel ranks per group (consecutive ranks, one node)
  int64_t dp = 1;      // data-parallel groups
  bool zero1 = false;  // ZeRO-1: AdamW moments sharded over the dp ranks (docs/PARALLEL.md)

  Status Validate() const;
  bool operator==(const ParallelConfig&) const = default;
};

// INVALID_ARGUMENT naming the field unless `tp` tensor-parallel ranks can split `model`: its
// heads, KV heads, FFN width and vocabulary (docs/PARALLEL.md).
Status CheckTensorParallelSplit(const ModelConfig& model, int64_t tp);

// Where and how often a job writes checkpoints (docs/DESIGN.md §6).
struct CheckpointConfig {
  std::string dir;             // root of step-<N>/ directories ("" = the job's directory)
  int64_t every_steps = 1000;  // steps between checkpoints; 0 = only at the end
  int64_t keep = 3;            // committed checkpoints kept; 0 = all

  Status Validate() const;
  bool operator==(const CheckpointConfig&) const = default;
};

// The compute budget of a coordinated job. The job completes when the next step would overrun
// it; the schedule's phases are fractions of it (common/step_plan.h).
struct BudgetConfig {
  BudgetKind kind = BudgetKind::kTokens;
  double amount = 0;  // in `kind` units; 0 = schedule.steps × data.batch_size × data.seq_len tokens

  Status Validate() const;
  bool operator==(const BudgetConfig&) const = default;
};

// How the coordinator launches (and relaunches) the job's worker group.
// launcher.slurm: the allocation a `kind: slurm` job asks Slurm for (docs/SLURM.md). Each field
// becomes one sbatch option; empty or 0 leaves it to the cluster's defaults.
struct SlurmConfig {
  std::string partition;                 // --partition
  int64_t nodes = 0;                     // --nodes
  int64_t tasks_per_node = 0;            // --ntasks-per-node (--ntasks is always the processes)
  int64_t cpus_per_task = 0;             // --cpus-per-task
  int64_t gpus_per_node = 0;             // --gres=gpu:N
  std::string time_limit;                // --time: M, M:S, H:M:S, D-H, D-H:M or D-H:M:S
  std::string account;                   // --account
  std::string qos;                       // --qos
  std::vector<std::string> sbatch_args;  // more sbatch options, e.g. [--constraint=a100]
  std::vector<std::string> srun_args;    // more srun options, after --mpi=pmix
  std::string log_dir;                   // attempt-<n>.out|.err|.sbatch; "" = the job's directory
  double pending_timeout_seconds = 0;    // a job pending longer has failed; 0 = no limit

  Status Validate() const;
  bool operator==(const SlurmConfig&) const = default;
};

struct LauncherConfig {
  LauncherKind kind = LauncherKind::kLocal;
  int64_t processes = 0;  // MPI ranks; 0 = parallel.tp × parallel.dp
  std::vector<std::string> command = {"fullband", "worker"};  // worker argv (without mpirun)
  std::vector<std::string> extra_args;                        // appended to `command`
  int64_t max_restarts = 3;                                   // relaunches before the job is FAILED
  double backoff_seconds = 10;       // wait before the first relaunch; doubles per restart
  double max_backoff_seconds = 600;  // cap of the doubling
  SlurmConfig slurm;                 // kind: slurm only

  Status Validate() const;
  bool operator==(const LauncherConfig&) const = default;
};

struct Config {
  static constexpr size_t kMaxStringBytes = 4096;  // any path, command word or name

  ModelConfig model;
  ParallelConfig parallel;
  DataConfig data;
  OptimConfig optim;
  ScheduleConfig schedule;
  CheckpointConfig checkpoint;
  BudgetConfig budget;
  LauncherConfig launcher;
  RuntimeConfig runtime;

  Status Validate() const;
  bool operator==(const Config&) const = default;
};

// Parses YAML text. `source` names the text in errors ("job.yaml"). The result is validated.
StatusOr<Config> ParseConfig(std::string_view yaml_text, std::string_view source);
// Reads and parses a YAML file (NOT_FOUND if it cannot be read).
StatusOr<Config> LoadConfigFile(const std::string& path);
// The YAML form of a config; ParseConfig(ConfigToYaml(c)) == c.
std::string ConfigToYaml(const Config& config);

}  // namespace fullband
