// Float64 reference implementations of every forward op in ops/backend.h, written straight from
// the contract there and docs/MODEL.md, naive loops with no shared code with the backends.
// Gradients are never implemented here: tests take them by central finite differences of these
// forwards (NumericalGradient), so a wrong reference forward cannot hide a wrong backward.
// Layouts match backend.h: row-major, shape comments use N = B·T rows.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace fullband::ops::ref {

using Vec = std::vector<double>;

// Numerically safe logistic function.
double Sigmoid(double x);

// C[i] = alpha * op(A[i]) op(B[i]) + beta * C[i] for i < batch; op(A) (m, k), op(B) (k, n),
// C (m, n) row-major with leading dimensions lda/ldb/ldc and batch strides (0 = broadcast).
// beta == 0 ignores C (NaN included). Only the (m, n) window of each C[i] is written.
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, int64_t stride_a, const double* b, int64_t ldb,
          int64_t stride_b, double beta, double* c, int64_t ldc, int64_t stride_c, int64_t batch);

// out (N, D) = table (V, D) rows picked by ids (N).
Vec Embedding(const Vec& table, const std::vector<int32_t>& ids, int64_t d);

// out (N, D) = x / sqrt(mean(x²) + eps) ⊙ gain; rstd (N) = 1 / sqrt(mean(x²) + eps).
void RmsNorm(const Vec& x, const Vec& gain, int64_t n, int64_t d, double eps, Vec* out, Vec* rstd);

// Rotate-half RoPE of x (B, T, nH, Dh): pairs (i, i + Dh/2), angle t·theta^(-2i/Dh).
Vec Rope(const Vec& x, int64_t b, int64_t t, int64_t nh, int64_t dh, double theta);

struct AttentionDims {
  int64_t b = 1, t = 1, h = 1, hkv = 1, dh = 8;
  int64_t window = 0;  // 0: causal only; W: key s visible to query t iff t - W < s <= t
  double scale = 0;    // 0: 1/sqrt(Dh)
};
// Causal GQA attention. q (B, T, H, Dh), k, v (B, T, Hkv, Dh) -> out (B, T, H, Dh),
// lse (B, H, T) = log Σ_visible exp(scale · q·k).
void Attention(const Vec& q, const Vec& k, const Vec& v, const AttentionDims& dims, Vec* out,
               Vec* lse);

// out (N, H, Dh) = x · sigmoid(gate (N, H)).
Vec HeadGate(const Vec& x, const Vec& gate, int64_t n, int64_t h, int64_t dh);

// out = silu(gate) ⊙ up, elementwise.
Vec SwiGlu(const Vec& gate, const Vec& up);

// out[b, 0] = 0, out[b, t] = x[b, t-1]; x (B, T, D).
Vec ShiftRight(const Vec& x, int64_t b, int64_t t, int64_t d);

// out[n] = plain[n] ? e[n] : value[n] ⊙ sigmoid(gate[n]); all (N, D), plain (N).
Vec FeedbackMix(const Vec& value, const Vec& gate, const Vec& e, const std::vector<uint8_t>& plain,
                int64_t n, int64_t d);

// x + scale · branch.
Vec Residual(const Vec& x, const Vec& branch, double scale);

// logits (N, V). lse (N) of every row; loss (N) = lse - logits[target], 0 where target ==
// ignore_id.
void CrossEntropy(const Vec& logits, const std::vector<int32_t>& targets, int64_t n, int64_t v,
                  int32_t ignore_id, Vec* loss, Vec* lse);

// The scalar whose gradient CrossEntropyBackward computes:
//   Σ over counted rows of ce_scale · loss + z_scale · lse².
double CrossEntropyObjective(const Vec& logits, const std::vector<int32_t>& targets, int64_t n,
                             int64_t v, int32_t ignore_id, double ce_scale, double z_scale);

struct AdamWParams {
  double lr, beta1, beta2, eps, weight_decay, grad_scale;
  int64_t step;
};
// One PyTorch-order AdamW step in place: g = grad_scale·grad; p *= 1 - lr·wd;
// m = β1 m + (1-β1) g; v = β2 v + (1-β2) g²; p -= lr · m̂ / (sqrt(v̂) + eps) with
// m̂ = m / (1 - β1^step), v̂ = v / (1 - β2^step).
void AdamWStep(Vec* param, const Vec& grad, Vec* m, Vec* v, const AdamWParams& params);

double SumSquares(const Vec& x);
Vec Scale(const Vec& x, double alpha);

// ---- Finite differences.
// Σ a ⊙ b.
double Dot(const Vec& a, const Vec& b);
// Central differences (loss(x + h e_i) - loss(x - h e_i)) / 2h for every element i of *x, which
// is perturbed in place and restored; loss() reads *x.
Vec NumericalGradient(const std::function<double()>& loss, Vec* x, double h = 1e-6);

}  // namespace fullband::ops::ref
