// Causal grouped-query attention kernels of the CUDA backend (flash-attention style, fp32, no
// tensor cores). q, out (B, T, H, Dh); k, v (B, T, Hkv, Dh); lse (B, H, T); query head h reads
// kv head h / (H / Hkv); key s is visible to query t iff s <= t and (W == 0 or s > t - W).
// Forward: online softmax over key tiles, saves lse. Backward: one kernel over query tiles for
// dq, one over key tiles for dk/dv (summing the kv head's query heads in-block, no atomics);
// both recompute P = exp(scale·q·k - lse) and D_t = Σ dO_t ⊙ O_t. Dh <= 256, held in registers
// as NC chunks of 32 lanes (NC a compile-time bucket).
#include <cmath>

#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/kernels.h"

namespace fullband::ops::kernels {
namespace {

constexpr int kTile = 32;                          // query rows and keys per tile
constexpr int kQueryWarps = 4;                     // forward and dq kernels
constexpr int kRowsPerWarp = kTile / kQueryWarps;  // query rows owned by one warp
constexpr int kKeyWarps = 8;                       // dk/dv kernel
constexpr int kKeysPerWarp = kTile / kKeyWarps;    // keys owned by one warp
constexpr int kQueryThreads = kQueryWarps * kWarpSize;
constexpr int kKeyThreads = kKeyWarps * kWarpSize;
constexpr size_t kDefaultSharedLimit = 48 * 1024;  // above this, opt in per kernel

// Sizes as the kernels see them (int: T, heads and Dh are far below 2^31).
struct Dims {
  int t, h, hkv, dh, window;
  float scale;
};

__device__ __forceinline__ bool Visible(int t, int s, int seq_len, int window) {
  return t < seq_len && s <= t && (window <= 0 || s > t - window);
}

// Copies rows [row0, row0 + kTile) of head `head` of x (B, T, heads, Dh), batch b, into dst
// with row pitch `pitch`; rows past T are zero. All threads of the block take part.
__device__ void LoadTile(float* dst, int pitch, const float* x, int b, int row0, int head,
                         int seq_len, int heads, int dh) {
  for (int e = threadIdx.x; e < kTile * dh; e += blockDim.x) {
    const int r = e / dh;
    const int d = e - r * dh;
    const int t = row0 + r;
    dst[r * pitch + d] =
        t < seq_len ? x[((static_cast<int64_t>(b) * seq_len + t) * heads + head) * dh + d] : 0.0f;
  }
}

// Grid (query tiles, B·H), kQueryWarps warps; warp w owns query rows w·8 .. w·8+7 of the tile
// and lane j scores key j of each key tile. Shared: Q (32, Dh), K (32, Dh+1), V (32, Dh),
// P (32, 32).
template <int NC>
__global__ void __launch_bounds__(kQueryThreads)
    AttentionForwardKernel(float* out, float* lse, const float* q, const float* k, const float* v,
                           Dims dims) {
  extern __shared__ float smem[];
  const int seq_len = dims.t, dh = dims.dh, kpitch = dims.dh + 1;
  float* qs = smem;                 // (kTile, Dh)
  float* ks = qs + kTile * dh;      // (kTile, Dh + 1)
  float* vs = ks + kTile * kpitch;  // (kTile, Dh)
  float* ps = vs + kTile * dh;      // (kTile, kTile)

  const int q0 = (gridDim.x - 1 - blockIdx.x) * kTile;  // longest rows first
  const int b = blockIdx.y / dims.h;
  const int h = blockIdx.y % dims.h;
  const int g = h / (dims.h / dims.hkv);
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int row0 = warp * kRowsPerWarp;  // first tile row of this warp

  LoadTile(qs, dh, q, b, q0, h, seq_len, dims.h, dh);

  float o[kRowsPerWarp][NC];
  float m[kRowsPerWarp];
  float l[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c) o[r][c] = 0.0f;
  }

  const int t_last = min(seq_len - 1, q0 + kTile - 1);
  const int s_first = dims.window > 0 ? max(0, q0 - dims.window + 1) : 0;
  for (int k0 = s_first / kTile * kTile; k0 <= t_last; k0 += kTile) {
    __syncthreads();  // the previous tile is consumed (and Q is loaded)
    LoadTile(ks, kpitch, k, b, k0, g, seq_len, dims.hkv, dh);
    LoadTile(vs, dh, v, b, k0, g, seq_len, dims.hkv, dh);
    __syncthreads();

    // Scores of key k0 + lane against this warp's rows.
    float score[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) score[r] = 0.0f;
    const float* k_row = ks + lane * kpitch;
#pragma unroll 4
    for (int d = 0; d < dh; ++d) {
      const float kd = k_row[d];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) score[r] += qs[(row0 + r) * dh + d] * kd;
    }

    // Online softmax update, one row at a time (warp-wide max and sum over the tile's keys).
    const int s = k0 + lane;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const bool visible = Visible(q0 + row0 + r, s, seq_len, dims.window);
      const float x = visible ? score[r] * dims.scale : -INFINITY;
      const float m_new = fmaxf(m[r], WarpMax(x));
      // While a row has seen no visible key, m_new is -inf: keep everything at zero.
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float p = visible ? expf(x - m_use) : 0.0f;
      const float correction = expf(m[r] - m_use);
      l[r] = l[r] * correction + WarpSum(p);
      m[r] = m_new;
#pragma unroll
      for (int c = 0; c < NC; ++c) o[r][c] *= correction;
      ps[(row0 + r) * kTile + lane] = p;
    }
    __syncwarp();

    // o += P V: lane owns dims lane + 32c.
    for (int j = 0; j < kTile; ++j) {
      float vd[NC];
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        const int d = lane + c * kWarpSize;
        vd[c] = d < dh ? vs[j * dh + d] : 0.0f;
      }
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float p = ps[(row0 + r) * kTile + j];
#pragma unroll
        for (int c = 0; c < NC; ++c) o[r][c] += p * vd[c];
      }
    }
    __syncwarp();
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int t = q0 + row0 + r;
    if (t >= seq_len) continue;
    float* out_row = out + ((static_cast<int64_t>(b) * seq_len + t) * dims.h + h) * dh;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int d = lane + c * kWarpSize;
      if (d < dh) out_row[d] = o[r][c] / l[r];
    }
    if (lane == 0) lse[static_cast<int64_t>(blockIdx.y) * seq_len + t] = m[r] + logf(l[r]);
  }
}

// D_t = Σ_d dO[t, d] · O[t, d] and lse_t for tile rows [first, first + count), one warp per row,
// into dd_s and lse_s (0 for rows past T).
__device__ void LoadRowStats(float* dd_s, float* lse_s, const float* dout, const float* out,
                             const float* lse, int b, int h, int q0, int first, int count,
                             const Dims& dims) {
  const int lane = threadIdx.x % kWarpSize;
  for (int r = first; r < first + count; ++r) {
    const int t = q0 + r;
    float sum = 0.0f;
    if (t < dims.t) {
      const int64_t offset = ((static_cast<int64_t>(b) * dims.t + t) * dims.h + h) * dims.dh;
      for (int d = lane; d < dims.dh; d += kWarpSize) sum += dout[offset + d] * out[offset + d];
    }
    sum = WarpSum(sum);
    if (lane == 0) {
      dd_s[r] = sum;
      lse_s[r] = t < dims.t ? lse[(static_cast<int64_t>(b) * dims.h + h) * dims.t + t] : 0.0f;
    }
  }
}

// dq = scale · dS K over the visible keys. Grid (query tiles, B·H), kQueryWarps warps, the
// layout of the forward kernel. Shared: Q, dO (32, Dh); K, V (32, Dh+1); dS (32, 32); lse, D.
template <int NC>
__global__ void __launch_bounds__(kQueryThreads)
    AttentionBackwardDqKernel(float* dq, const float* dout, const float* q, const float* k,
                              const float* v, const float* out, const float* lse, Dims dims) {
  extern __shared__ float smem[];
  const int seq_len = dims.t, dh = dims.dh, kpitch = dims.dh + 1;
  float* qs = smem;                    // (kTile, Dh)
  float* dos = qs + kTile * dh;        // (kTile, Dh)
  float* ks = dos + kTile * dh;        // (kTile, Dh + 1)
  float* vs = ks + kTile * kpitch;     // (kTile, Dh + 1)
  float* dss = vs + kTile * kpitch;    // (kTile, kTile)
  float* lse_s = dss + kTile * kTile;  // (kTile)
  float* dd_s = lse_s + kTile;         // (kTile)

  const int q0 = (gridDim.x - 1 - blockIdx.x) * kTile;
  const int b = blockIdx.y / dims.h;
  const int h = blockIdx.y % dims.h;
  const int g = h / (dims.h / dims.hkv);
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int row0 = warp * kRowsPerWarp;

  LoadTile(qs, dh, q, b, q0, h, seq_len, dims.h, dh);
  LoadTile(dos, dh, dout, b, q0, h, seq_len, dims.h, dh);
  LoadRowStats(dd_s, lse_s, dout, out, lse, b, h, q0, row0, kRowsPerWarp, dims);

  float acc[kRowsPerWarp][NC];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[r][c] = 0.0f;
  }

  const int t_last = min(seq_len - 1, q0 + kTile - 1);
  const int s_first = dims.window > 0 ? max(0, q0 - dims.window + 1) : 0;
  for (int k0 = s_first / kTile * kTile; k0 <= t_last; k0 += kTile) {
    __syncthreads();
    LoadTile(ks, kpitch, k, b, k0, g, seq_len, dims.hkv, dh);
    LoadTile(vs, kpitch, v, b, k0, g, seq_len, dims.hkv, dh);
    __syncthreads();

    float score[kRowsPerWarp];
    float dp[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) score[r] = dp[r] = 0.0f;
    const float* k_row = ks + lane * kpitch;
    const float* v_row = vs + lane * kpitch;
#pragma unroll 2
    for (int d = 0; d < dh; ++d) {
      const float kd = k_row[d];
      const float vd = v_row[d];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        score[r] += qs[(row0 + r) * dh + d] * kd;
        dp[r] += dos[(row0 + r) * dh + d] * vd;
      }
    }

    const int s = k0 + lane;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = row0 + r;
      const bool visible = Visible(q0 + row, s, seq_len, dims.window);
      const float p = visible ? expf(score[r] * dims.scale - lse_s[row]) : 0.0f;
      dss[row * kTile + lane] = p * (dp[r] - dd_s[row]);
    }
    __syncwarp();

    for (int j = 0; j < kTile; ++j) {
      float kd[NC];
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        const int d = lane + c * kWarpSize;
        kd[c] = d < dh ? ks[j * kpitch + d] : 0.0f;
      }
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float ds = dss[(row0 + r) * kTile + j];
#pragma unroll
        for (int c = 0; c < NC; ++c) acc[r][c] += ds * kd[c];
      }
    }
    __syncwarp();
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int t = q0 + row0 + r;
    if (t >= seq_len) continue;
    float* dq_row = dq + ((static_cast<int64_t>(b) * seq_len + t) * dims.h + h) * dh;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int d = lane + c * kWarpSize;
      if (d < dh) dq_row[d] = dims.scale * acc[r][c];
    }
  }
}

// dk = scale · dSᵀ Q and dv = Pᵀ dO for one tile of keys of kv head g, summed over the query
// heads of g and the query tiles that see the keys. Grid (key tiles, B·Hkv), kKeyWarps warps;
// warp w owns keys w·4 .. w·4+3 of the tile and lane i is query i of each query tile.
// Shared: K, V (32, Dh); Q, dO (32, Dh+1); P, dS (32 keys, 32 queries); lse, D.
template <int NC>
__global__ void __launch_bounds__(kKeyThreads)
    AttentionBackwardDkDvKernel(float* dk, float* dv, const float* dout, const float* q,
                                const float* k, const float* v, const float* out, const float* lse,
                                Dims dims) {
  extern __shared__ float smem[];
  const int seq_len = dims.t, dh = dims.dh, qpitch = dims.dh + 1;
  float* ks = smem;                    // (kTile, Dh)
  float* vs = ks + kTile * dh;         // (kTile, Dh)
  float* qs = vs + kTile * dh;         // (kTile, Dh + 1)
  float* dos = qs + kTile * qpitch;    // (kTile, Dh + 1)
  float* ps = dos + kTile * qpitch;    // (kTile keys, kTile queries)
  float* dss = ps + kTile * kTile;     // (kTile keys, kTile queries)
  float* lse_s = dss + kTile * kTile;  // (kTile)
  float* dd_s = lse_s + kTile;         // (kTile)

  const int k0 = blockIdx.x * kTile;
  const int b = blockIdx.y / dims.hkv;
  const int g = blockIdx.y % dims.hkv;
  const int group = dims.h / dims.hkv;
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int key0 = warp * kKeysPerWarp;  // first tile key of this warp

  LoadTile(ks, dh, k, b, k0, g, seq_len, dims.hkv, dh);
  LoadTile(vs, dh, v, b, k0, g, seq_len, dims.hkv, dh);

  float dk_acc[kKeysPerWarp][NC];
  float dv_acc[kKeysPerWarp][NC];
#pragma unroll
  for (int jj = 0; jj < kKeysPerWarp; ++jj) {
#pragma unroll
    for (int c = 0; c < NC; ++c) dk_acc[jj][c] = dv_acc[jj][c] = 0.0f;
  }

  // Queries that see a key of this tile: k0 <= t <= k0 + kTile - 1 + W - 1.
  const int t_last =
      dims.window > 0 ? min(seq_len - 1, k0 + kTile - 1 + dims.window - 1) : seq_len - 1;
  for (int h = g * group; h < (g + 1) * group; ++h) {
    for (int q0 = k0; q0 <= t_last; q0 += kTile) {
      __syncthreads();  // the previous query tile is consumed (and K, V are loaded)
      LoadTile(qs, qpitch, q, b, q0, h, seq_len, dims.h, dh);
      LoadTile(dos, qpitch, dout, b, q0, h, seq_len, dims.h, dh);
      LoadRowStats(dd_s, lse_s, dout, out, lse, b, h, q0, warp * (kTile / kKeyWarps),
                   kTile / kKeyWarps, dims);
      __syncthreads();

      float score[kKeysPerWarp];
      float dp[kKeysPerWarp];
#pragma unroll
      for (int jj = 0; jj < kKeysPerWarp; ++jj) score[jj] = dp[jj] = 0.0f;
      const float* q_row = qs + lane * qpitch;
      const float* do_row = dos + lane * qpitch;
#pragma unroll 2
      for (int d = 0; d < dh; ++d) {
        const float qd = q_row[d];
        const float dod = do_row[d];
#pragma unroll
        for (int jj = 0; jj < kKeysPerWarp; ++jj) {
          score[jj] += qd * ks[(key0 + jj) * dh + d];
          dp[jj] += dod * vs[(key0 + jj) * dh + d];
        }
      }

      const int t = q0 + lane;
#pragma unroll
      for (int jj = 0; jj < kKeysPerWarp; ++jj) {
        const bool visible = Visible(t, k0 + key0 + jj, seq_len, dims.window);
        const float p = visible ? expf(score[jj] * dims.scale - lse_s[lane]) : 0.0f;
        ps[(key0 + jj) * kTile + lane] = p;
        dss[(key0 + jj) * kTile + lane] = p * (dp[jj] - dd_s[lane]);
      }
      __syncwarp();

      for (int i = 0; i < kTile; ++i) {
        float qd[NC];
        float dod[NC];
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          const int d = lane + c * kWarpSize;
          qd[c] = d < dh ? qs[i * qpitch + d] : 0.0f;
          dod[c] = d < dh ? dos[i * qpitch + d] : 0.0f;
        }
#pragma unroll
        for (int jj = 0; jj < kKeysPerWarp; ++jj) {
          const float p = ps[(key0 + jj) * kTile + i];
          const float ds = dss[(key0 + jj) * kTile + i];
#pragma unroll
          for (int c = 0; c < NC; ++c) {
            dv_acc[jj][c] += p * dod[c];
            dk_acc[jj][c] += ds * qd[c];
          }
        }
      }
      __syncwarp();
    }
  }

#pragma unroll
  for (int jj = 0; jj < kKeysPerWarp; ++jj) {
    const int s = k0 + key0 + jj;
    if (s >= seq_len) continue;
    const int64_t offset = ((static_cast<int64_t>(b) * seq_len + s) * dims.hkv + g) * dh;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int d = lane + c * kWarpSize;
      if (d < dh) {
        dk[offset + d] = dims.scale * dk_acc[jj][c];
        dv[offset + d] = dv_acc[jj][c];
      }
    }
  }
}

Dims ToKernelDims(const AttentionDims& dims) {
  // A window at least T long masks nothing.
  const int64_t window = dims.window >= dims.t ? 0 : dims.window;
  return Dims{static_cast<int>(dims.t),  static_cast<int>(dims.h), static_cast<int>(dims.hkv),
              static_cast<int>(dims.dh), static_cast<int>(window), dims.scale};
}

// Raises the kernel's dynamic shared memory limit when it needs more than the default.
template <typename Kernel>
void AllowSharedMemory(Kernel kernel, size_t bytes) {
  if (bytes <= kDefaultSharedLimit) return;
  FB_CALL_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

template <int NC>
void LaunchForward(cudaStream_t stream, float* out, float* lse, const float* q, const float* k,
                   const float* v, const AttentionDims& dims) {
  const Dims kd = ToKernelDims(dims);
  const size_t bytes = sizeof(float) * (3 * kTile * kd.dh + kTile + kTile * kTile);
  AllowSharedMemory(AttentionForwardKernel<NC>, bytes);
  const dim3 grid(static_cast<unsigned>((dims.t + kTile - 1) / kTile),
                  static_cast<unsigned>(dims.b * dims.h));
  AttentionForwardKernel<NC><<<grid, kQueryThreads, bytes, stream>>>(out, lse, q, k, v, kd);
  CheckLaunch();
}

template <int NC>
void LaunchBackward(cudaStream_t stream, float* dq, float* dk, float* dv, const float* dout,
                    const float* q, const float* k, const float* v, const float* out,
                    const float* lse, const AttentionDims& dims) {
  const Dims kd = ToKernelDims(dims);
  const unsigned tiles = static_cast<unsigned>((dims.t + kTile - 1) / kTile);
  // Both kernels: two (32, Dh) and two (32, Dh + 1) tiles, 32×32 (dq) or 2·32×32 (dk/dv)
  // score tiles, lse and D.
  const size_t dq_bytes =
      sizeof(float) * (4 * kTile * kd.dh + 2 * kTile + kTile * kTile + 2 * kTile);
  const size_t dkdv_bytes =
      sizeof(float) * (4 * kTile * kd.dh + 2 * kTile + 2 * kTile * kTile + 2 * kTile);
  AllowSharedMemory(AttentionBackwardDqKernel<NC>, dq_bytes);
  AllowSharedMemory(AttentionBackwardDkDvKernel<NC>, dkdv_bytes);
  AttentionBackwardDqKernel<NC>
      <<<dim3(tiles, static_cast<unsigned>(dims.b * dims.h)), kQueryThreads, dq_bytes, stream>>>(
          dq, dout, q, k, v, out, lse, kd);
  CheckLaunch();
  AttentionBackwardDkDvKernel<NC>
      <<<dim3(tiles, static_cast<unsigned>(dims.b * dims.hkv)), kKeyThreads, dkdv_bytes, stream>>>(
          dk, dv, dout, q, k, v, out, lse, kd);
  CheckLaunch();
}

// Register chunks per lane for head dim dh: the smallest bucket with 32·NC >= dh.
int Chunks(int64_t dh) {
  FB_CHECK(dh > 0 && dh <= kMaxAttentionHeadDim) << "attention head dim " << dh;
  if (dh <= 64) return 2;
  if (dh <= 96) return 3;
  if (dh <= 128) return 4;
  return 8;
}

void CheckGrid(const AttentionDims& dims) {
  constexpr int64_t kMaxGridY = 65535;
  FB_CHECK(dims.b * dims.h <= kMaxGridY) << "attention: B·H = " << dims.b * dims.h;
  FB_CHECK(dims.t < (int64_t{1} << 30)) << "attention: T = " << dims.t;
}

}  // namespace

void AttentionForward(cudaStream_t stream, float* out, float* lse, const float* q, const float* k,
                      const float* v, const AttentionDims& dims) {
  if (dims.b * dims.t * dims.h == 0) return;
  CheckGrid(dims);
  switch (Chunks(dims.dh)) {
    case 2:
      return LaunchForward<2>(stream, out, lse, q, k, v, dims);
    case 3:
      return LaunchForward<3>(stream, out, lse, q, k, v, dims);
    case 4:
      return LaunchForward<4>(stream, out, lse, q, k, v, dims);
    default:
      return LaunchForward<8>(stream, out, lse, q, k, v, dims);
  }
}

void AttentionBackward(cudaStream_t stream, float* dq, float* dk, float* dv, const float* dout,
                       const float* q, const float* k, const float* v, const float* out,
                       const float* lse, const AttentionDims& dims) {
  if (dims.b * dims.t * dims.h == 0) return;
  CheckGrid(dims);
  switch (Chunks(dims.dh)) {
    case 2:
      return LaunchBackward<2>(stream, dq, dk, dv, dout, q, k, v, out, lse, dims);
    case 3:
      return LaunchBackward<3>(stream, dq, dk, dv, dout, q, k, v, out, lse, dims);
    case 4:
      return LaunchBackward<4>(stream, dq, dk, dv, dout, q, k, v, out, lse, dims);
    default:
      return LaunchBackward<8>(stream, dq, dk, dv, dout, q, k, v, out, lse, dims);
  }
}

}  // namespace fullband::ops::kernels
