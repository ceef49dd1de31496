// SIMD helpers for the CPU kernels: float vectors of the target's native width (GCC vector
// extensions) and a vectorized exp. Only ops/cpu/simd_kernels.cc includes this header; it is
// compiled once per instruction set, and everything here lives in that build's namespace
// FB_SIMD_NS (Note [One kernel file per instruction set] in ops/cpu/simd_kernels.h).
#pragma once

#include <cstdint>
#include <cstring>

#ifndef FB_SIMD_NS
#error "vec_math.h is for ops/cpu/simd_kernels.cc, built with FB_SIMD_NS set (ops/CMakeLists.txt)"
#endif

#define FB_VEC_INLINE inline __attribute__((always_inline))

namespace fullband::ops::cpu::FB_SIMD_NS {

#if defined(__AVX512F__)
inline constexpr int kLanes = 16;
#elif defined(__AVX__)
inline constexpr int kLanes = 8;
#else
inline constexpr int kLanes = 4;
#endif
typedef float VecF __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t VecI __attribute__((vector_size(kLanes * sizeof(int32_t))));

// Every lane x. (x - 0 is x for every x, so this compiles to one broadcast; VecF{} + x cost an
// add per call, since -0 + 0 is +0.)
FB_VEC_INLINE VecF Broadcast(float x) { return x - VecF{}; }

FB_VEC_INLINE VecF LoadU(const float* p) {
  VecF v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
FB_VEC_INLINE void StoreU(float* p, VecF v) { std::memcpy(p, &v, sizeof(v)); }

// Loads n < kLanes floats, filling the rest with `fill`.
FB_VEC_INLINE VecF LoadPartial(const float* p, int n, float fill) {
  VecF v = Broadcast(fill);
  for (int i = 0; i < n; ++i) v[i] = p[i];
  return v;
}
FB_VEC_INLINE void StorePartial(float* p, VecF v, int n) {
  for (int i = 0; i < n; ++i) p[i] = v[i];
}

// n ≤ kLanes floats: a whole vector when n == kLanes, else a partial one (zero-filled).
FB_VEC_INLINE VecF LoadUpTo(const float* p, int n) {
  return n == kLanes ? LoadU(p) : LoadPartial(p, n, 0.0f);
}
FB_VEC_INLINE void StoreUpTo(float* p, VecF v, int n) {
  if (n == kLanes) {
    StoreU(p, v);
  } else {
    StorePartial(p, v, n);
  }
}

FB_VEC_INLINE VecF Max(VecF a, VecF b) { return a > b ? a : b; }

FB_VEC_INLINE float ReduceMax(VecF v) {
  float m = v[0];
  for (int i = 1; i < kLanes; ++i) m = v[i] > m ? v[i] : m;
  return m;
}
FB_VEC_INLINE float ReduceSum(VecF v) {
  // Pairwise, in a fixed order.
  float s[kLanes];
  std::memcpy(s, &v, sizeof(s));
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int i = 0; i < w; ++i) s[i] += s[i + w];
  }
  return s[0];
}

// exp(x) for every lane, relative error < 2e-7 over the float range (Cephes polynomial with
// Cody–Waite range reduction). exp(x) = 0 for x < -87.3 (including -inf), +inf above 88.7.
FB_VEC_INLINE VecF Exp(VecF x) {
  const VecF kLog2e = Broadcast(1.44269504088896341f);
  const VecF kC1 = Broadcast(0.693359375f);
  const VecF kC2 = Broadcast(-2.12194440e-4f);
  const VecI underflow = x < Broadcast(-87.33654f);
  const VecI overflow = x > Broadcast(88.72283f);
  VecF xc = x < Broadcast(-87.33654f) ? Broadcast(-87.33654f) : x;
  xc = xc > Broadcast(88.72283f) ? Broadcast(88.72283f) : xc;
  // n = round(x·log2 e) via the float-to-int conversion of (x·log2e + 0.5) floored.
  VecF fx = xc * kLog2e + Broadcast(0.5f);
  VecI n = __builtin_convertvector(fx, VecI);
  VecF nf = __builtin_convertvector(n, VecF);
  nf = nf > fx ? nf - Broadcast(1.0f) : nf;  // truncation toward zero -> floor
  n = __builtin_convertvector(nf, VecI);
  const VecF r = xc - nf * kC1 - nf * kC2;
  VecF p = Broadcast(1.9875691500e-4f);
  p = p * r + Broadcast(1.3981999507e-3f);
  p = p * r + Broadcast(8.3334519073e-3f);
  p = p * r + Broadcast(4.1665795894e-2f);
  p = p * r + Broadcast(1.6666665459e-1f);
  p = p * r + Broadcast(5.0000001201e-1f);
  p = p * r * r + r + Broadcast(1.0f);
  // Scale by 2^n in two halves so that n = 128 (x near 88.7) does not overflow the exponent.
  const VecI n1 = n >> 1;
  const VecI n2 = n - n1;
  VecF s1, s2;
  const VecI e1 = (n1 + 127) << 23;
  const VecI e2 = (n2 + 127) << 23;
  std::memcpy(&s1, &e1, sizeof(s1));
  std::memcpy(&s2, &e2, sizeof(s2));
  VecF result = p * s1 * s2;
  VecI bits;
  std::memcpy(&bits, &result, sizeof(bits));
  bits &= ~underflow;
  VecF out;
  std::memcpy(&out, &bits, sizeof(out));
  return overflow ? Broadcast(__builtin_inff()) : out;
}

FB_VEC_INLINE VecF Sigmoid(VecF x) { return Broadcast(1.0f) / (Broadcast(1.0f) + Exp(-x)); }

}  // namespace fullband::ops::cpu::FB_SIMD_NS
