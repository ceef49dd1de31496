// ReadoutCrossEntropy: the loss head of the model — logits = h Eᵀ over a large vocabulary,
// cross-entropy with ignore id and z-loss — computed in chunks of rows so that the full
// (B·T, V) logits never exist: only one (chunk_rows, V) block at a time, on any backend.
//
// Forward and backward are fused: each chunk's logits are formed, reduced to per-row
// log-sum-exp and loss, and (when gradients are requested) turned into dlogits in place and
// multiplied out into dh and dE before the next chunk reuses the block. The loss being
// differentiated is  ce_scale · Σ_rows CE + z_scale · Σ_rows lse²  over counted rows, so the
// caller passes the scales of its mean (1 / counted targets, times the pass weight).
#pragma once

#include <cstdint>
#include <functional>

#include "ops/backend.h"

namespace fullband::ops {

struct ReadoutLossSums {
  double ce_sum = 0.0;  // Σ over counted rows of lse - logit[target]
  double z_sum = 0.0;   // Σ over counted rows of lse²
  int64_t counted = 0;  // rows whose target != ignore_id
};

struct ReadoutBuffers {
  Tensor logits;    // (chunk_rows, ld) f32 scratch, ld ≥ V the row pitch (LogitsPitch(V));
                    // its first dim sets the chunk size
  Tensor row_loss;  // (N) f32 scratch: per-row CE of the whole batch
  Tensor row_lse;   // (N) f32 scratch: per-row log-sum-exp
};

// h (N, D), embed (V, D), targets (N) i32 (on the backend's device; the targets are also read
// on the host through `host_targets` (N) to count rows without a device round trip).
// When dh is non-empty: dh (N, D) is overwritten and dembed (V, D) accumulated with the
// gradient of ce_scale·ce_sum + z_scale·z_sum. Returns the sums (synchronizes).
// The row pitch for a vocabulary of v: Note [Logits pitch] in readout_loss.cc.
int64_t LogitsPitch(int64_t v);

//
// A vocabulary shard (tensor parallelism, docs/PARALLEL.md): `embed` holds this rank's rows of
// the table and a target held by another shard is kOtherShard (ops/backend.h). `combine`,
// called for each chunk after its local forward and before its backward with the chunk's
// per-row loss and lse (rows from `first_row`), replaces them with the global values (the
// log-sum-exp over every shard; the loss of a row whose target is here, 0 elsewhere). Then
// ce_sum is this shard's part (the caller sums it over the shards), z_sum the global value, and
// dh this shard's part of the gradient (summed over the shards by the caller).
using CombineRows = std::function<void(Tensor loss, Tensor lse, int64_t first_row)>;

ReadoutLossSums ReadoutCrossEntropy(Backend& backend, Tensor h, Tensor embed, Tensor targets,
                                    const int32_t* host_targets, int32_t ignore_id,
                                    const ReadoutBuffers& buffers, float ce_scale, float z_scale,
                                    Tensor dh, Tensor dembed, const CombineRows& combine = nullptr);

}  // namespace fullband::ops
