// Float64 reference ops for tests/ops: the plainest loops that state each contract of
// ops/backend.h, with stable softmax / log-sum-exp (max subtracted) and nothing else clever.
#include "tests/ops/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/check.h"

namespace fullband::ops::ref {

double Sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, int64_t stride_a, const double* b, int64_t ldb,
          int64_t stride_b, double beta, double* c, int64_t ldc, int64_t stride_c, int64_t batch) {
  for (int64_t i = 0; i < batch; ++i) {
    const double* ai = a + i * stride_a;
    const double* bi = b + i * stride_b;
    double* ci = c + i * stride_c;
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t col = 0; col < n; ++col) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double av = trans_a ? ai[p * lda + r] : ai[r * lda + p];      // op(A)[r, p]
          const double bv = trans_b ? bi[col * ldb + p] : bi[p * ldb + col];  // op(B)[p, col]
          acc += av * bv;
        }
        double& out = ci[r * ldc + col];
        out = alpha * acc + (beta == 0 ? 0.0 : beta * out);
      }
    }
  }
}

Vec Embedding(const Vec& table, const std::vector<int32_t>& ids, int64_t d) {
  const int64_t v = static_cast<int64_t>(table.size()) / d;
  Vec out(ids.size() * d);
  for (size_t row = 0; row < ids.size(); ++row) {
    FB_CHECK(ids[row] >= 0 && ids[row] < v) << "reference embedding id " << ids[row];
    for (int64_t j = 0; j < d; ++j) out[row * d + j] = table[ids[row] * d + j];
  }
  return out;
}

void RmsNorm(const Vec& x, const Vec& gain, int64_t n, int64_t d, double eps, Vec* out, Vec* rstd) {
  out->assign(n * d, 0.0);
  rstd->assign(n, 0.0);
  for (int64_t row = 0; row < n; ++row) {
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += x[row * d + j] * x[row * d + j];
    const double r = 1.0 / std::sqrt(ss / d + eps);
    (*rstd)[row] = r;
    for (int64_t j = 0; j < d; ++j) (*out)[row * d + j] = x[row * d + j] * r * gain[j];
  }
}

Vec Rope(const Vec& x, int64_t b, int64_t t, int64_t nh, int64_t dh, double theta) {
  FB_CHECK(dh % 2 == 0) << "reference RoPE needs an even Dh, got " << dh;
  const int64_t half = dh / 2;
  Vec out(x.size());
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t ti = 0; ti < t; ++ti) {
      for (int64_t hi = 0; hi < nh; ++hi) {
        const int64_t base = ((bi * t + ti) * nh + hi) * dh;
        for (int64_t i = 0; i < half; ++i) {
          const double angle = ti * std::pow(theta, -2.0 * i / dh);
          const double c = std::cos(angle), s = std::sin(angle);
          const double x1 = x[base + i], x2 = x[base + i + half];
          out[base + i] = x1 * c - x2 * s;
          out[base + i + half] = x2 * c + x1 * s;
        }
      }
    }
  }
  return out;
}

void Attention(const Vec& q, const Vec& k, const Vec& v, const AttentionDims& dims, Vec* out,
               Vec* lse) {
  const int64_t B = dims.b, T = dims.t, H = dims.h, Hkv = dims.hkv, Dh = dims.dh;
  FB_CHECK(H % Hkv == 0) << "reference attention H=" << H << " Hkv=" << Hkv;
  const double scale = dims.scale != 0 ? dims.scale : 1.0 / std::sqrt(static_cast<double>(Dh));
  out->assign(B * T * H * Dh, 0.0);
  lse->assign(B * H * T, 0.0);
  std::vector<double> scores(T);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / Hkv);
      for (int64_t t = 0; t < T; ++t) {
        const double* qr = &q[((b * T + t) * H + h) * Dh];
        double max_score = -std::numeric_limits<double>::infinity();
        for (int64_t s = 0; s < T; ++s) {
          const bool visible = s <= t && (dims.window == 0 || t - dims.window < s);
          if (!visible) {
            scores[s] = -std::numeric_limits<double>::infinity();
            continue;
          }
          const double* kr = &k[((b * T + s) * Hkv + g) * Dh];
          double dot = 0;
          for (int64_t j = 0; j < Dh; ++j) dot += qr[j] * kr[j];
          scores[s] = scale * dot;
          max_score = std::max(max_score, scores[s]);
        }
        double denom = 0;
        for (int64_t s = 0; s < T; ++s) {
          if (scores[s] != -std::numeric_limits<double>::infinity()) {
            denom += std::exp(scores[s] - max_score);
          }
        }
        const double row_lse = max_score + std::log(denom);
        (*lse)[(b * H + h) * T + t] = row_lse;
        double* o = &(*out)[((b * T + t) * H + h) * Dh];
        for (int64_t s = 0; s < T; ++s) {
          if (scores[s] == -std::numeric_limits<double>::infinity()) continue;
          const double p = std::exp(scores[s] - row_lse);
          const double* vr = &v[((b * T + s) * Hkv + g) * Dh];
          for (int64_t j = 0; j < Dh; ++j) o[j] += p * vr[j];
        }
      }
    }
  }
}

Vec HeadGate(const Vec& x, const Vec& gate, int64_t n, int64_t h, int64_t dh) {
  Vec out(n * h * dh);
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t hi = 0; hi < h; ++hi) {
      const double s = Sigmoid(gate[row * h + hi]);
      for (int64_t j = 0; j < dh; ++j) {
        const int64_t idx = (row * h + hi) * dh + j;
        out[idx] = x[idx] * s;
      }
    }
  }
  return out;
}

Vec SwiGlu(const Vec& gate, const Vec& up) {
  Vec out(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) out[i] = gate[i] * Sigmoid(gate[i]) * up[i];
  return out;
}

Vec ShiftRight(const Vec& x, int64_t b, int64_t t, int64_t d) {
  Vec out(b * t * d, 0.0);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t ti = 1; ti < t; ++ti) {
      for (int64_t j = 0; j < d; ++j) out[(bi * t + ti) * d + j] = x[(bi * t + ti - 1) * d + j];
    }
  }
  return out;
}

Vec FeedbackMix(const Vec& value, const Vec& gate, const Vec& e, const std::vector<uint8_t>& plain,
                int64_t n, int64_t d) {
  Vec out(n * d);
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t j = 0; j < d; ++j) {
      const int64_t i = row * d + j;
      out[i] = plain[row] != 0 ? e[i] : value[i] * Sigmoid(gate[i]);
    }
  }
  return out;
}

Vec Residual(const Vec& x, const Vec& branch, double scale) {
  Vec out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] + scale * branch[i];
  return out;
}

void CrossEntropy(const Vec& logits, const std::vector<int32_t>& targets, int64_t n, int64_t v,
                  int32_t ignore_id, Vec* loss, Vec* lse) {
  loss->assign(n, 0.0);
  lse->assign(n, 0.0);
  for (int64_t row = 0; row < n; ++row) {
    const double* l = &logits[row * v];
    double max_logit = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < v; ++j) max_logit = std::max(max_logit, l[j]);
    double denom = 0;
    for (int64_t j = 0; j < v; ++j) denom += std::exp(l[j] - max_logit);
    (*lse)[row] = max_logit + std::log(denom);
    if (targets[row] != ignore_id) {
      FB_CHECK(targets[row] >= 0 && targets[row] < v) << "reference target " << targets[row];
      (*loss)[row] = (*lse)[row] - l[targets[row]];
    }
  }
}

double CrossEntropyObjective(const Vec& logits, const std::vector<int32_t>& targets, int64_t n,
                             int64_t v, int32_t ignore_id, double ce_scale, double z_scale) {
  Vec loss, lse;
  CrossEntropy(logits, targets, n, v, ignore_id, &loss, &lse);
  double total = 0;
  for (int64_t row = 0; row < n; ++row) {
    if (targets[row] == ignore_id) continue;
    total += ce_scale * loss[row] + z_scale * lse[row] * lse[row];
  }
  return total;
}

void AdamWStep(Vec* param, const Vec& grad, Vec* m, Vec* v, const AdamWParams& params) {
  const double bias1 = 1.0 - std::pow(params.beta1, static_cast<double>(params.step));
  const double bias2 = 1.0 - std::pow(params.beta2, static_cast<double>(params.step));
  for (size_t i = 0; i < param->size(); ++i) {
    const double g = params.grad_scale * grad[i];
    double& p = (*param)[i];
    p *= 1.0 - params.lr * params.weight_decay;
    (*m)[i] = params.beta1 * (*m)[i] + (1.0 - params.beta1) * g;
    (*v)[i] = params.beta2 * (*v)[i] + (1.0 - params.beta2) * g * g;
    const double m_hat = (*m)[i] / bias1;
    const double v_hat = (*v)[i] / bias2;
    p -= params.lr * m_hat / (std::sqrt(v_hat) + params.eps);
  }
}

double SumSquares(const Vec& x) {
  double total = 0;
  for (double e : x) total += e * e;
  return total;
}

Vec Scale(const Vec& x, double alpha) {
  Vec out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * alpha;
  return out;
}

double Dot(const Vec& a, const Vec& b) {
  FB_CHECK_EQ(a.size(), b.size());
  double total = 0;
  for (size_t i = 0; i < a.size(); ++i) total += a[i] * b[i];
  return total;
}

Vec NumericalGradient(const std::function<double()>& loss, Vec* x, double h) {
  Vec grad(x->size());
  for (size_t i = 0; i < x->size(); ++i) {
    const double saved = (*x)[i];
    const double up = saved + h, down = saved - h;  // the step actually taken, after rounding
    (*x)[i] = up;
    const double plus = loss();
    (*x)[i] = down;
    const double minus = loss();
    (*x)[i] = saved;
    grad[i] = (plus - minus) / (up - down);
  }
  return grad;
}

}  // namespace fullband::ops::ref
