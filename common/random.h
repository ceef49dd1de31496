// Rng: a small, fully specified pseudo-random generator (xoshiro256**, seeded by SplitMix64)
// whose draws are the same on every platform and standard library — unlike <random>'s
// distributions — so that a seed names the same initialization, jitter and prefix mixin
// everywhere, and a restarted job redraws exactly what it drew before.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

namespace fullband {

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& s : state_) s = SplitMix(seed);
  }
  // A generator for a named stream under `seed` (e.g. one per parameter tensor).
  static Rng ForStream(uint64_t seed, std::string_view name) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
    return Rng(seed ^ (h * 0x9E3779B97F4A7C15ull));
  }

  uint64_t Next() {
    const uint64_t result = Rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = Rotl(state_[3], 45);
    return result;
  }
  // Uniform in [0, n), unbiased (rejection), n >= 1.
  uint64_t Below(uint64_t n) {
    const uint64_t limit = -n % n;  // 2^64 mod n
    for (;;) {
      const uint64_t x = Next();
      if (x >= limit) return x % n;
    }
  }
  // Uniform double in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Standard normal (Box–Muller; one draw per call).
  double Normal() {
    const double u1 = 1.0 - Uniform();  // (0, 1]
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t SplitMix(uint64_t& x) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t state_[4];
};

}  // namespace fullband
