#include "common/schedule.h"

#include <algorithm>

#include "common/random.h"

namespace fullband {

int64_t PassesAtFraction(const ScheduleConfig& schedule, double fraction, int64_t step) {
  const SchedulePhase* phase = &schedule.phases.back();
  for (const SchedulePhase& p : schedule.phases) {
    if (fraction < p.until) {
      phase = &p;
      break;
    }
  }
  Rng rng(static_cast<uint64_t>(schedule.seed) * 0x9E3779B97F4A7C15ull ^
          static_cast<uint64_t>(step));
  const double u = rng.Uniform();
  double cumulative = 0;
  for (const auto& [passes, prob] : phase->mix) {
    cumulative += prob;
    if (u < cumulative) return passes;
  }
  // Rounding left u above the last cumulative sum: the last pass count with weight.
  for (auto it = phase->mix.rbegin(); it != phase->mix.rend(); ++it) {
    if (it->second > 0) return it->first;
  }
  return 1;
}

double ModelFlopsPerToken(const ModelConfig& m, int64_t num_params, int64_t seq_len) {
  double attention = 0;
  for (int64_t l = 0; l < m.n_layers; ++l) {
    const int64_t w = m.IsFullAttentionLayer(l) ? seq_len : std::min(seq_len, m.window);
    // Mean over t < T of min(t + 1, w) visible keys.
    double visible = 0;
    if (w >= seq_len) {
      visible = (seq_len + 1) / 2.0;
    } else {
      visible = (w * (w + 1) / 2.0 + static_cast<double>(seq_len - w) * w) / seq_len;
    }
    attention += 12.0 * m.n_heads * m.head_dim * visible;
  }
  return 6.0 * static_cast<double>(num_params) + attention;
}

}  // namespace fullband
