// The pass schedule (deterministic per step, phase by budget fraction, mix frequencies) and the
// model FLOPs formula.
#include "common/schedule.h"

#include <gtest/gtest.h>

#include <map>

#include "common/model_params.h"

namespace fullband {
namespace {

// The pass count of `step` of s.steps steps, each at budget fraction step / s.steps (the
// fraction of a token budget: common/step_plan.h).
int64_t PassesForStep(const ScheduleConfig& s, int64_t step) {
  return PassesAtFraction(s, static_cast<double>(step) / static_cast<double>(s.steps), step);
}

ScheduleConfig PaperSchedule(int64_t steps) {
  ScheduleConfig s;
  s.steps = steps;
  s.seed = 42;
  s.phases = {{0.75, {{1, 1.0}}}, {0.97, {{2, 1.0}}}, {1.0, {{3, 1.0}}}};
  return s;
}

TEST(PassSchedule, Phases_FollowTheBudgetFraction) {
  const ScheduleConfig s = PaperSchedule(100);
  EXPECT_EQ(PassesForStep(s, 0), 1);
  EXPECT_EQ(PassesForStep(s, 74), 1);
  EXPECT_EQ(PassesForStep(s, 75), 2);
  EXPECT_EQ(PassesForStep(s, 96), 2);
  EXPECT_EQ(PassesForStep(s, 97), 3);
  EXPECT_EQ(PassesForStep(s, 99), 3);
}

TEST(PassSchedule, SameStep_SameDraw_RegardlessOfOrder) {
  ScheduleConfig s;
  s.steps = 1000;
  s.seed = 3;
  s.phases = {{1.0, {{1, 0.75}, {2, 0.22}, {3, 0.03}}}};
  std::vector<int64_t> forward, backward(1000);
  for (int64_t i = 0; i < 1000; ++i) forward.push_back(PassesForStep(s, i));
  for (int64_t i = 999; i >= 0; --i) backward[i] = PassesForStep(s, i);
  EXPECT_EQ(forward, backward);
  s.seed = 4;
  int differ = 0;
  for (int64_t i = 0; i < 1000; ++i) differ += PassesForStep(s, i) != forward[i];
  EXPECT_GT(differ, 100);  // another seed is another draw
}

TEST(PassSchedule, Mix_FrequenciesMatchProbabilities) {
  ScheduleConfig s;
  s.steps = 200000;
  s.phases = {{1.0, {{1, 0.75}, {2, 0.22}, {3, 0.03}}}};
  std::map<int64_t, int64_t> counts;
  for (int64_t i = 0; i < s.steps; ++i) ++counts[PassesForStep(s, i)];
  // Binomial standard deviations at n = 200000: 0.1%, 0.09%, 0.04%; allow 5 of them.
  EXPECT_NEAR(counts[1] / 200000.0, 0.75, 0.005);
  EXPECT_NEAR(counts[2] / 200000.0, 0.22, 0.0047);
  EXPECT_NEAR(counts[3] / 200000.0, 0.03, 0.002);
}

TEST(ModelFlops, FullAttention_IsSixNPlusCausalAttention) {
  ModelConfig m;
  m.n_layers = 2;
  m.n_heads = 4;
  m.head_dim = 8;
  m.window = 0;
  // 6·N + 12·L·H·Dh·(T+1)/2 with T = 9: 6·1000 + 12·2·4·8·5 = 6000 + 3840.
  EXPECT_DOUBLE_EQ(ModelFlopsPerToken(m, 1000, 9), 9840.0);
}

TEST(ModelFlops, Window_CapsVisibleKeys) {
  ModelConfig m;
  m.n_layers = 1;
  m.n_heads = 1;
  m.head_dim = 1;
  m.window = 2;
  m.full_attention_every = 0;
  // T = 4, W = 2: visible keys 1, 2, 2, 2 -> mean 7/4; 12 · 7/4 = 21.
  EXPECT_DOUBLE_EQ(ModelFlopsPerToken(m, 0, 4), 21.0);
}

TEST(PassSchedule, PassesAtFraction_PicksThePhaseOfTheFraction) {
  const ScheduleConfig s = PaperSchedule(100);
  EXPECT_EQ(PassesAtFraction(s, 0.5, 3), 1);
  EXPECT_EQ(PassesAtFraction(s, 0.8, 3), 2);
  EXPECT_EQ(PassesAtFraction(s, 0.99, 3), 3);
  EXPECT_EQ(PassesAtFraction(s, 1.0, 3), 3);  // at or past the end: the last phase
}

TEST(ModelParameters, Count_FollowsTheWeightTable) {
  ModelConfig m;
  m.vocab_size = 10;
  m.d_model = 4;
  m.n_layers = 2;
  m.n_heads = 2;
  m.n_kv_heads = 1;
  m.head_dim = 2;
  m.ffn_dim = 3;
  m.eod_id = 0;
  // Per layer: norms 4+4, wq 2*2*4=16, wk+wv 2*1*2*4=16, wo 16, q/k norm 2+2, gate 2*4=8,
  // ffn 3*3*4=36 -> 104. Embed 40, final norm 4, feedback 4 + 32 + 4 = 40.
  EXPECT_EQ(ModelParameterCount(m), 40 + 2 * 104 + 4 + 40);
  m.qk_norm = false;
  m.attn_gate = false;
  EXPECT_EQ(ModelParameterCount(m), 40 + 2 * (104 - 12) + 4 + 40);
}

}  // namespace
}  // namespace fullband
