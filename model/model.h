// Model: the latent-feedback transformer of docs/MODEL.md on one ops::Backend, with its
// K-pass training step (forward through K passes, loss on every pass, backward through all of
// them with nothing detached).
//
// Memory (llm.c): parameters, gradients and activations each live in one arena; the parameter
// and gradient arenas are carved by the ParameterTable, the activation arena by the step's
// layout for (max_batch, max_seq, max_passes, recompute), all allocated once in Create().
// Recomputation (Note [Recomputation]): `none` keeps every layer's activations of every pass;
// `full` keeps per pass only the inputs of layers 1..L-1 (and the pass's readout gradient and
// feedback input) and recomputes the rest in backward. Tensors whose lifetimes do not overlap
// share bytes of the activation arena (Note [Activation layout] in activations.cc).
// Not thread-safe; one Model per backend.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/config.h"
#include "common/random.h"
#include "common/status.h"
#include "model/activations.h"
#include "model/param_table.h"
#include "ops/arena.h"
#include "ops/backend.h"

namespace fullband::model {

// Note [Step draws]: the jitter and the prefix-mixin draws of batch row r in pass k come from
// generators seeded by (seed, k, row_offset + r) alone, so a row gets the same draws whichever
// rank holds it: a data-parallel slice of a batch sees exactly the draws the whole batch would.
struct StepOptions {
  int passes = 1;             // K >= 1
  double jitter = 0.0;        // ξ ~ U(-jitter, jitter) on h before feedback (0: none)
  bool prefix_mixin = false;  // per segment and pass, a random plain prefix
  uint64_t seed = 0;          // draws of the jitter and the mixin (Note [Step draws])
  int64_t row_offset = 0;     // index of this batch's first row in the global batch
  // The number of targets every mean is taken over; 0: this batch's own counted targets. A
  // data-parallel rank passes the global batch's count, so that its losses and gradients are
  // its share of the global ones and summing them over the ranks gives the global values.
  int64_t loss_count = 0;
  bool backward = true;  // false: losses only
  // Called during backward with each range [begin, end) of the gradient arena (in floats)
  // whose gradients are final for this step: every layer's, top layer first, then the final
  // norm's. What it is never called for (the embedding, the feedback parameters) is final when
  // Step returns. The ops that wrote the range have been issued on the backend (the CPU backend
  // has run them). Used to start data-parallel reductions while backward goes on.
  std::function<void(int64_t begin, int64_t end)> grads_final;
};

// Means are over StepOptions::loss_count targets (this batch's own count by default).
struct StepResult {
  std::vector<double> pass_loss;  // ℓ_k = CE_k + z_loss · mean(lse²), k = 1..K
  std::vector<double> pass_ce;    // CE_k alone
  double total = 0.0;             // ℓ_1 + mean(ℓ_2..K) or the sum (feedback_loss)
  int64_t counted = 0;            // targets != ignore_id in this batch
  // plain[k-2] is the (B, T) plain mask of pass k >= 2 (nonzero: plain position).
  std::vector<std::vector<uint8_t>> plain;
};

class Model {
 public:
  // Validates the config and shape, builds the table and allocates every arena. With `tp` (a
  // group of more than one rank, outliving the model) the model is this rank's tensor-parallel
  // share (docs/PARALLEL.md): every rank of the group steps the same batch together. `tp`
  // reduces host memory; `tp_device` (default: `tp`) the backend's, over the same ranks.
  static StatusOr<std::unique_ptr<Model>> Create(const ModelConfig& config, const ModelShape& shape,
                                                 ops::Backend* backend,
                                                 comm::Communicator* tp = nullptr,
                                                 comm::Communicator* tp_device = nullptr);
  ~Model();

  const ModelConfig& config() const { return config_; }
  const ParameterTable& table() const { return table_; }
  ops::Backend& backend() { return *backend_; }

  // N(0, std²) matrices (docs/MODEL.md), gains 1; each tensor seeded by (seed, name) and drawn
  // whole, so a tensor-parallel rank holds its box of the same values as one rank would.
  void InitParameters(uint64_t seed);
  // Safetensors with exactly the table's keys and whole shapes (F32); errors name the key. A
  // tensor-parallel rank loads its box of each tensor.
  Status LoadParameters(const std::string& path);
  // The whole model: FAILED_PRECONDITION for a tensor-parallel rank, which holds a share
  // (its sharded checkpoint, exported by `fullband ckpt export`, is the whole model).
  Status SaveParameters(const std::string& path) const;
  // Writes `grad.<key>` for every parameter plus the given extra float scalars (one rank only).
  Status SaveGradients(const std::string& path,
                       const std::vector<std::pair<std::string, float>>& scalars,
                       const std::vector<std::pair<std::string, std::vector<uint8_t>>>& masks,
                       int64_t batch, int64_t seq) const;

  // Views of a parameter / its gradient.
  ops::Tensor Param(const ParamSpec& spec) const;
  ops::Tensor Grad(const ParamSpec& spec) const;
  ops::Tensor params() const { return params_all_; }
  ops::Tensor grads() const { return grads_all_; }
  void ZeroGradients();

  // One K-pass step on tokens (B, T + 1) (host memory; inputs [:, :-1], targets [:, 1:]).
  // With options.backward, gradients of the total loss are ADDED to the gradient arena (call
  // ZeroGradients() first for a fresh step). INVALID_ARGUMENT for a batch outside the shape
  // the model was created for, or token ids outside the vocabulary.
  StatusOr<StepResult> Step(const int32_t* tokens, int64_t batch, int64_t seq,
                            const StepOptions& options);

  // Bytes of the activation arena (for memory reports).
  size_t activation_bytes() const;
  // The readout's logits scratch: (chunk rows, row pitch ≥ this rank's vocabulary rows).
  ops::Shape readout_block() const;

 private:
  struct Impl;
  Model(const ModelConfig& config, const ModelShape& shape, ops::Backend* backend,
        comm::Communicator* tp);

  ModelConfig config_;
  ModelShape shape_;
  ops::Backend* backend_;
  ParameterTable table_;
  std::unique_ptr<Impl> impl_;
  ops::Tensor params_all_, grads_all_;
};

// The plain mask of one pass for one row of T input tokens (docs/MODEL.md): segment starts
// are plain; with `mixin`, the first p positions of each segment, p ~ U{1..len}.
void PlainMask(const int32_t* inputs, int64_t t, int64_t eod_id, bool mixin, Rng& rng,
               uint8_t* plain);

// The generator of one kind of draw (0: jitter, 1: mixin) of global batch row `row` in pass
// `pass` of a step seeded by `seed` (Note [Step draws]).
Rng StepDrawRng(uint64_t seed, int pass, int64_t row, int kind);

}  // namespace fullband::model
