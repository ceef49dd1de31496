// AdamW over the parameter arena against a hand computation in double: global-norm clipping
// (active and not), the bias-corrected update at a later step number, and the weight-decay
// groups (matrices always; the embedding and the norm gains only when configured); the
// warmup–stable–decay learning rate.
#include "model/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/common/test_configs.h"

namespace fullband::model {
namespace {

struct Case {
  double grad_scale;  // multiplies the gradients: sets their global norm
  bool decay_embedding, decay_norms;
};

class OptimizerTest : public ::testing::TestWithParam<Case> {};

TEST_P(OptimizerTest, Step_MatchesAHandComputationForEveryParameterKind) {
  const Case c = GetParam();
  const ParameterTable table = ParameterTable::Build(TinyTestModel());
  ops::BackendOptions bo;
  bo.num_threads = 1;
  std::unique_ptr<ops::Backend> be = ops::CreateBackend(bo).value();
  OptimConfig o;
  o.lr = 0.01;
  o.weight_decay = 0.1;
  o.grad_clip = 1.0;
  o.warmup_steps = 0;
  o.decay_embedding = c.decay_embedding;
  o.decay_norms = c.decay_norms;
  std::unique_ptr<AdamW> adam = AdamW::Create(o, table, be.get()).value();
  const int64_t n = table.total_numel();
  std::vector<float> p(n, 0.0f), g(n, 0.0f);
  double norm2 = 0;
  for (const ParamSpec& s : table.specs()) {
    for (int64_t i = s.offset; i < s.offset + s.numel; ++i) {
      p[i] = 0.5f + 0.001f * static_cast<float>(i % 97);
      g[i] = static_cast<float>(c.grad_scale * std::sin(0.37 * static_cast<double>(i)));
      norm2 += static_cast<double>(g[i]) * g[i];
    }
  }
  const std::vector<float> p0 = p;
  const int64_t step = 3, total = 100;
  const OptimizerStats stats =
      adam->Step(ops::Tensor::F32(p.data(), {n}, ops::Device::kCpu),
                 ops::Tensor::F32(g.data(), {n}, ops::Device::kCpu), step, total);
  const double norm = std::sqrt(norm2);
  const double clip = norm > o.grad_clip ? o.grad_clip / norm : 1.0;
  EXPECT_NEAR(stats.grad_norm, norm, 1e-9 * norm);
  EXPECT_NEAR(stats.clip_scale, clip, 1e-6 * clip);
  EXPECT_DOUBLE_EQ(stats.lr, LearningRate(o, step, total));
  const double bias1 = 1 - std::pow(o.beta1, step + 1), bias2 = 1 - std::pow(o.beta2, step + 1);
  for (const ParamSpec& s : table.specs()) {
    const bool decayed = s.kind == ParamKind::kMatrix ||
                         (s.kind == ParamKind::kEmbedding && c.decay_embedding) ||
                         (s.kind == ParamKind::kNormGain && c.decay_norms);
    for (int64_t i = s.offset; i < s.offset + s.numel; i += 7) {
      const double grad = clip * g[i];
      const double m = (1 - o.beta1) * grad, v = (1 - o.beta2) * grad * grad;
      double want = p0[i] * (decayed ? 1 - o.lr * o.weight_decay : 1.0);
      want -= o.lr * (m / bias1) / (std::sqrt(v / bias2) + o.eps);
      ASSERT_NEAR(p[i], want, 2e-6 * std::max(1.0, std::abs(want)))
          << s.name << "[" << i - s.offset << "] decayed=" << decayed;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ClippedOrNot_DecayGroups, OptimizerTest,
                         ::testing::Values(Case{1.0, false, false},   // norm ≫ 1: clipped
                                           Case{1e-4, false, false},  // norm < 1: not clipped
                                           Case{1.0, true, false},    // the embedding decays
                                           Case{1.0, false, true}));  // the norm gains decay

TEST(LearningRate, WarmupStableDecay) {
  OptimConfig o;
  o.lr = 1.0;
  o.warmup_steps = 10;
  o.cooldown_fraction = 0.25;
  EXPECT_DOUBLE_EQ(LearningRate(o, 0, 100), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(o, 9, 100), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(o, 50, 100), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(o, 74, 100), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(o, 75, 100), 1.0);  // (100 - 75) / 25
  EXPECT_DOUBLE_EQ(LearningRate(o, 90, 100), 0.4);
  EXPECT_DOUBLE_EQ(LearningRate(o, 99, 100), 0.04);
}

}  // namespace
}  // namespace fullband::model
