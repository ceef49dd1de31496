#include "ops/readout_loss.h"

#include <algorithm>
#include <vector>

namespace fullband::ops {

// Note [Logits pitch]: the dE GEMM reads the chunk's dlogits down its columns. When the row
// pitch is a multiple of a large power of two (V = 4,096: 16 KB; V = 100,352 = 2¹¹·49: 8 KB),
// every row of a column block maps to the same few cache sets and the GEMM's packing thrashes:
// oneDNN's dE GEMM for tiny (V = 4,096) ran about half as fast with pitch 4,096 as with 4,112.
// The pitch is V rounded up to whole 64-byte lines, plus one line when that makes an even
// number of lines.
int64_t LogitsPitch(int64_t v) {
  constexpr int64_t kLine = 16;  // floats per 64-byte cache line
  int64_t lines = (v + kLine - 1) / kLine;
  if (lines % 2 == 0) ++lines;
  return lines * kLine;
}

ReadoutLossSums ReadoutCrossEntropy(Backend& backend, Tensor h, Tensor embed, Tensor targets,
                                    const int32_t* host_targets, int32_t ignore_id,
                                    const ReadoutBuffers& buffers, float ce_scale, float z_scale,
                                    Tensor dh, Tensor dembed, const CombineRows& combine) {
  FB_CHECK(h.rank() == 2 && embed.rank() == 2 && h.dim(1) == embed.dim(1))
      << h.ToString() << " " << embed.ToString();
  const int64_t n = h.dim(0), d = h.dim(1), v = embed.dim(0);
  FB_CHECK_EQ(targets.numel(), n);
  FB_CHECK(buffers.logits.rank() == 2 && buffers.logits.dim(1) >= v) << buffers.logits.ToString();
  const int64_t ld = buffers.logits.dim(1);
  FB_CHECK(buffers.row_loss.numel() >= n && buffers.row_lse.numel() >= n);
  const bool backward = !dh.empty();
  if (backward) {
    FB_CHECK(dh.shape == h.shape && dembed.shape == embed.shape);
  }
  const int64_t chunk = buffers.logits.dim(0);
  FB_CHECK_GT(chunk, 0);
  float* loss = buffers.row_loss.f32();
  float* lse = buffers.row_lse.f32();
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t rows = std::min(chunk, n - r0);
    Tensor logits(buffers.logits.data, DType::kF32, {rows, v}, buffers.logits.device);
    const Tensor hc(h.f32() + r0 * d, DType::kF32, {rows, d}, h.device);
    const Tensor tc(targets.i32() + r0, DType::kI32, {rows}, targets.device);
    const Tensor lc(loss + r0, DType::kF32, {rows}, h.device);
    const Tensor sc(lse + r0, DType::kF32, {rows}, h.device);
    // logits = h_chunk Eᵀ   (rows, V), rows ld apart
    backend.Gemm(false, true, rows, v, d, 1.0f, hc.f32(), d, embed.f32(), d, 0.0f, logits.f32(),
                 ld);
    backend.CrossEntropyForward(lc, sc, logits, ld, tc, ignore_id);
    if (combine) combine(lc, sc, r0);
    if (!backward) continue;
    backend.CrossEntropyBackward(logits, logits, ld, sc, tc, ce_scale, z_scale, ignore_id);
    // dh_chunk = dlogits E   (rows, D);   dE += dlogitsᵀ h_chunk   (V, D)
    backend.Gemm(false, false, rows, d, v, 1.0f, logits.f32(), ld, embed.f32(), d, 0.0f,
                 dh.f32() + r0 * d, d);
    backend.Gemm(true, false, v, d, rows, 1.0f, logits.f32(), ld, hc.f32(), d, 1.0f, dembed.f32(),
                 d);
  }
  std::vector<float> host_loss(n), host_lse(n);
  backend.CopyToHost(host_loss.data(), loss, n * sizeof(float));
  backend.CopyToHost(host_lse.data(), lse, n * sizeof(float));
  ReadoutLossSums sums;
  for (int64_t i = 0; i < n; ++i) {
    if (host_targets[i] == ignore_id) continue;
    ++sums.counted;
    sums.ce_sum += host_loss[i];
    sums.z_sum += static_cast<double>(host_lse[i]) * host_lse[i];
  }
  return sums;
}

}  // namespace fullband::ops
