#include "dataloader/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <sstream>

#include "common/check.h"

namespace fullband::dataloader {
namespace {

// SplitMix64's finalizer: a strong 64-bit mix, the round function and the key schedule.
uint64_t Mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr uint64_t kSourceSalt = 0x5EEDF00DCAFEB0BAull;
constexpr uint64_t kBlendSalt = 0xB1E2D3C4A5968778ull;

}  // namespace

Permutation::Permutation(uint64_t n, uint64_t key) : n_(n) {
  FB_CHECK(n >= 1 && n < (1ull << 62)) << "permutation size " << n;
  int bits = std::max(2, static_cast<int>(std::bit_width(n - 1)));
  bits += bits & 1;  // an even number of bits: two equal halves
  half_bits_ = bits / 2;
  half_mask_ = (1ull << half_bits_) - 1;
  uint64_t k = key;
  for (uint64_t& round_key : keys_) round_key = k = Mix(k);
}

uint64_t Permutation::Round(uint64_t half, int round) const {
  return Mix(half ^ keys_[round]) & half_mask_;
}

uint64_t Permutation::Encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & half_mask_;
  for (int r = 0; r < 4; ++r) {
    const uint64_t next = left ^ Round(right, r);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

// Cycle walking: the Feistel network permutes [0, 2^bits) ⊇ [0, n); following x's cycle until
// it re-enters [0, n) restricts it to a permutation of [0, n). The domain is < 4n, so the
// expected number of steps is < 4.
uint64_t Permutation::Apply(uint64_t x) const {
  FB_CHECK_LT(x, n_);
  uint64_t y = Encrypt(x);
  while (y >= n_) y = Encrypt(y);
  return y;
}

std::string SamplerCursor::ToString() const {
  std::ostringstream out;
  out << "draws=" << draws << " consumed=[";
  for (size_t i = 0; i < consumed.size(); ++i) out << (i ? "," : "") << consumed[i];
  out << "]";
  return out.str();
}

StatusOr<Sampler> Sampler::Create(std::vector<int64_t> sizes, std::vector<double> weights,
                                  uint64_t seed) {
  if (sizes.empty()) return InvalidArgumentError("sampler: no data source");
  if (sizes.size() != weights.size()) {
    return InvalidArgumentError("sampler: " + std::to_string(sizes.size()) + " sources but " +
                                std::to_string(weights.size()) + " weights");
  }
  double total = 0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    if (sizes[s] < 1) {
      return InvalidArgumentError("sampler: source " + std::to_string(s) + " holds no sequence");
    }
    if (!(weights[s] > 0) || !std::isfinite(weights[s])) {
      return InvalidArgumentError("sampler: source " + std::to_string(s) + " has weight " +
                                  std::to_string(weights[s]) + ", which must be > 0");
    }
    total += weights[s];
  }
  std::vector<double> cumulative(weights.size());
  double run = 0;
  for (size_t s = 0; s < weights.size(); ++s) cumulative[s] = (run += weights[s]) / total;
  cumulative.back() = 1.0;
  return Sampler(std::move(sizes), std::move(cumulative), seed);
}

SamplerCursor Sampler::Start() const {
  return SamplerCursor{0, std::vector<uint64_t>(sizes_.size(), 0)};
}

int Sampler::SourceOf(uint64_t draw) const {
  if (sizes_.size() == 1) return 0;
  const double u = static_cast<double>(Mix(seed_ ^ Mix(draw ^ kBlendSalt)) >> 11) * 0x1.0p-53;
  for (size_t s = 0; s + 1 < cumulative_.size(); ++s) {
    if (u < cumulative_[s]) return static_cast<int>(s);
  }
  return static_cast<int>(cumulative_.size()) - 1;
}

SamplerCursor Sampler::CursorAt(uint64_t draws) const {
  SamplerCursor c = Start();
  if (sizes_.size() == 1) {
    c.draws = draws;
    c.consumed[0] = draws;
  } else {
    while (c.draws < draws) Advance(&c);
  }
  return c;
}

Status Sampler::CheckCursor(const SamplerCursor& cursor) const {
  if (cursor.consumed.size() != sizes_.size()) {
    return InvalidArgumentError("sampler cursor: " + std::to_string(cursor.consumed.size()) +
                                " per-source counts for " + std::to_string(sizes_.size()) +
                                " sources");
  }
  uint64_t sum = 0;
  for (uint64_t c : cursor.consumed) sum += c;
  if (sum != cursor.draws) {
    return InvalidArgumentError("sampler cursor: per-source counts add up to " +
                                std::to_string(sum) +
                                ", not draws = " + std::to_string(cursor.draws));
  }
  return OkStatus();
}

Sampler::Step Sampler::Advance(SamplerCursor* cursor) const {
  const int s = SourceOf(cursor->draws++);
  return Step{s, cursor->consumed[s]++};
}

Sampler::Draw Sampler::Next(SamplerCursor* cursor) const {
  const auto [s, at] = Advance(cursor);
  const uint64_t n = static_cast<uint64_t>(sizes_[s]);
  const uint64_t epoch = at / n;
  const Permutation order(n, seed_ ^ Mix(kSourceSalt ^ (static_cast<uint64_t>(s) << 40) ^ epoch));
  return Draw{s, static_cast<int64_t>(order.Apply(at % n)), static_cast<int64_t>(epoch)};
}

void Sampler::NextBatch(int rank, int dp, int64_t batch, SamplerCursor* cursor,
                        std::vector<Draw>* out) const {
  FB_CHECK(dp >= 1 && rank >= 0 && rank < dp) << "rank " << rank << " of " << dp;
  out->clear();
  out->reserve(static_cast<size_t>(batch));
  // Rank r's draws are the contiguous slice [r·batch, (r + 1)·batch) of the next batch × dp:
  // the same rows, in the same order, as one rank reading the whole global batch. The other
  // ranks' draws only advance the cursor: which source each goes to is all this rank needs.
  for (int64_t i = 0; i < batch * dp; ++i) {
    if (i / batch == rank) {
      out->push_back(Next(cursor));
    } else {
      Advance(cursor);
    }
  }
}

}  // namespace fullband::dataloader
