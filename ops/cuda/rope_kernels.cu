// RoPE kernels of the CUDA backend: rotate-half (NeoX) pairs (i, i + Dh/2) of x (B, T, nH, Dh)
// by angle t · theta^(-2i/Dh), t the row's index along T. As on the CPU backend, the angle and
// its sin/cos are computed in float64 and rounded to float once, so both backends rotate by the
// same float factors. The backward pass rotates by -angle. out may alias x.
#include <cmath>

#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/kernels.h"

namespace fullband::ops::kernels {
namespace {

// One thread per (b, t, i), i < Dh/2: computes cos/sin once and rotates that pair in every
// head. sign = -1 for the inverse rotation.
__global__ void RopeKernel(float* out, const float* x, int64_t b, int64_t t, int64_t heads,
                           int64_t dh, double theta, float sign) {
  const int64_t half = dh / 2;
  const int64_t pairs = b * t * half;
  for (int64_t idx = GlobalThread(); idx < pairs; idx += GridStride()) {
    const int64_t bt = idx / half;  // row index b·T + t
    const int64_t i = idx - bt * half;
    const int64_t pos = bt % t;
    const double inv_freq = pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(dh));
    const double angle = static_cast<double>(pos) * inv_freq;
    double sin_d, cos_d;
    sincos(angle, &sin_d, &cos_d);
    const float c = static_cast<float>(cos_d);
    const float s = sign * static_cast<float>(sin_d);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t base = (bt * heads + h) * dh + i;
      const float x0 = x[base];
      const float x1 = x[base + half];
      out[base] = x0 * c - x1 * s;
      out[base + half] = x1 * c + x0 * s;
    }
  }
}

}  // namespace

void Rope(cudaStream_t stream, float* out, const float* x, int64_t b, int64_t t, int64_t heads,
          int64_t dh, float theta, bool inverse) {
  const int64_t pairs = b * t * (dh / 2);
  if (pairs == 0 || heads == 0) return;
  RopeKernel<<<GridFor(pairs), kBlockThreads, 0, stream>>>(
      out, x, b, t, heads, dh, static_cast<double>(theta), inverse ? -1.0f : 1.0f);
  CheckLaunch();
}

}  // namespace fullband::ops::kernels
