// Sampler: which sequence every training draw reads, as a pure function of (seed, cursor).
//
// Each source (a token store of N sequences) is visited in epochs; epoch e is a seeded
// permutation of [0, N) that is computed, never materialized (a Feistel bijection with cycle
// walking), so any position of any epoch costs O(1). Several sources are blended by weight:
// draw j goes to a source chosen by a hash of (seed, j). Draws are numbered globally across data-
// parallel ranks; rank r of dp takes the draws j with j % dp == r, so the shards are disjoint and
// together cover every epoch. The cursor is a few integers; restored, it yields exactly the same
// stream (Note [Sampler cursor]). Samplers are immutable and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace fullband::dataloader {

// A bijection of [0, n) chosen by a 64-bit key; Apply and Invert are O(1) expected.
class Permutation {
 public:
  Permutation(uint64_t n, uint64_t key);
  uint64_t Apply(uint64_t x) const;  // x < n
  uint64_t size() const { return n_; }

 private:
  uint64_t Round(uint64_t half, int round) const;
  uint64_t Encrypt(uint64_t x) const;  // a bijection of [0, 2^(2·half_bits_))

  uint64_t n_;
  int half_bits_;
  uint64_t half_mask_;
  uint64_t keys_[4];
};

// Note [Sampler cursor]: `draws` counts every draw so far over all DP ranks; `consumed[s]`
// counts the draws that went to source s (its epoch is consumed[s] / N_s, its position in the
// epoch consumed[s] % N_s). With one source consumed[0] == draws. A checkpoint stores it; the
// coordinator's lease names `draws` and CursorAt rebuilds the rest.
struct SamplerCursor {
  uint64_t draws = 0;
  std::vector<uint64_t> consumed;

  bool operator==(const SamplerCursor&) const = default;
  std::string ToString() const;  // "draws=12 consumed=[7,5]"
};

class Sampler {
 public:
  struct Draw {
    int source = 0;     // which store
    int64_t index = 0;  // which sequence of it
    int64_t epoch = 0;  // which pass over that store
  };

  // `sizes[s]` sequences in source s, sampled with probability weights[s] / Σ weights.
  // INVALID_ARGUMENT when there is no source, a size < 1, a weight that is not > 0, or the
  // lists differ in length.
  static StatusOr<Sampler> Create(std::vector<int64_t> sizes, std::vector<double> weights,
                                  uint64_t seed);

  int num_sources() const { return static_cast<int>(sizes_.size()); }
  // A cursor at the start of the stream.
  SamplerCursor Start() const;
  // The cursor after `draws` global draws (O(draws) with several sources, O(1) with one).
  SamplerCursor CursorAt(uint64_t draws) const;
  // INVALID_ARGUMENT when `cursor` does not belong to this sampler (wrong number of sources,
  // per-source counts that do not add up to draws).
  Status CheckCursor(const SamplerCursor& cursor) const;

  // The draw at the cursor; advances the cursor by one.
  Draw Next(SamplerCursor* cursor) const;
  // The `batch` draws of DP rank `rank` of `dp`: the contiguous slice [rank·batch,
  // (rank + 1)·batch) of the next batch × dp global draws, in order; advances the cursor past
  // all batch × dp of them.
  void NextBatch(int rank, int dp, int64_t batch, SamplerCursor* cursor,
                 std::vector<Draw>* out) const;

 private:
  Sampler(std::vector<int64_t> sizes, std::vector<double> cumulative, uint64_t seed)
      : sizes_(std::move(sizes)), cumulative_(std::move(cumulative)), seed_(seed) {}
  int SourceOf(uint64_t draw) const;
  // One draw: its source, and its position in that source's stream.
  struct Step {
    int source;
    uint64_t position;
  };
  // Advances the cursor by one draw and returns that draw.
  Step Advance(SamplerCursor* cursor) const;

  std::vector<int64_t> sizes_;
  std::vector<double> cumulative_;  // cumulative normalized weights, last == 1
  uint64_t seed_;
};

}  // namespace fullband::dataloader
