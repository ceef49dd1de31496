// StepPlan: steps a budget allows, pass counts over the budget fraction, determinism.
#include "common/step_plan.h"

#include <gtest/gtest.h>

#include "common/model_params.h"
#include "common/schedule.h"
#include "tests/common/test_configs.h"

namespace fullband {
namespace {

Config SmallConfig() { return SmallTestConfig(); }

TEST(StepPlan, TokenBudget_AllowsWholeStepsOnly) {
  Config c = SmallConfig();
  c.budget.amount = 128 * 10 + 127;  // ten steps and a bit
  StatusOr<StepPlan> plan = StepPlan::Create(c);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->total_steps(), 10);
  c.budget.amount = 128 * 10;  // exactly ten
  EXPECT_EQ(StepPlan::Create(c)->total_steps(), 10);
}

TEST(StepPlan, ZeroAmount_MeansScheduleStepsOfTokens) {
  Config c = SmallConfig();
  c.budget.amount = 0;
  c.schedule.steps = 37;
  EXPECT_EQ(StepPlan::Create(c)->total_steps(), 37);
  c.budget.kind = BudgetKind::kFlops;
  StatusOr<StepPlan> plan = StepPlan::Create(c);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("budget.amount: required"), std::string::npos);
}

TEST(StepPlan, BudgetBelowOneStep_IsInvalid) {
  Config c = SmallConfig();
  c.budget.amount = 100;
  StatusOr<StepPlan> plan = StepPlan::Create(c);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("does not fit one step"), std::string::npos);
}

// Token-equivalents at 1 pass then 3 passes from half the budget: the phase switches when half
// the token-equivalents are spent, i.e. after 50 one-pass steps of a 100 × 128 × 2 budget
// (100 × 128 one-pass, then (12800 - 6400) / 384 = 16 three-pass steps).
TEST(StepPlan, TokenEquivalentBudget_PhasesFollowTheSpentFraction) {
  Config c = SmallConfig();
  c.schedule.phases = {{0.5, {{1, 1.0}}}, {1.0, {{3, 1.0}}}};
  c.budget.kind = BudgetKind::kTokenEquivalents;
  c.budget.amount = 128.0 * 100;
  StatusOr<StepPlan> plan = StepPlan::Create(c);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->Passes(49), 1);
  EXPECT_EQ(plan->Passes(50), 3);
  EXPECT_EQ(plan->total_steps(), 50 + 16);  // 6400 + 16·384 = 12544 <= 12800 < 12928
}

TEST(StepPlan, FlopBudget_CountsModelFlopsPerPass) {
  Config c = SmallConfig();
  c.schedule.phases = {{1.0, {{2, 1.0}}}};
  const double per_token =
      ModelFlopsPerToken(c.model, ModelParameterCount(c.model), c.data.seq_len);
  c.budget.kind = BudgetKind::kFlops;
  c.budget.amount = 7.5 * 128 * 2 * per_token;
  StatusOr<StepPlan> plan = StepPlan::Create(c);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->total_steps(), 7);
  EXPECT_DOUBLE_EQ(plan->StepFlops(2), 128 * 2 * per_token);
}

TEST(StepPlan, Assign_IsAPureFunctionOfConfigAndStep) {
  Config c = SmallConfig();
  c.schedule.phases = {{1.0, {{1, 0.75}, {2, 0.22}, {3, 0.03}}}};
  c.schedule.seed = 5;
  c.data.seed = 9;
  c.budget.amount = 128 * 1000;
  const StepPlan a = *StepPlan::Create(c);
  const StepPlan b = *StepPlan::Create(c);
  int mixed = 0;
  for (int64_t step = 0; step < 1000; ++step) {
    ASSERT_EQ(a.Assign(step), b.Assign(step));
    // A token budget puts step s at fraction s / steps.
    EXPECT_EQ(a.Passes(step), PassesAtFraction(c.schedule, step / 1000.0, step));
    mixed += a.Passes(step) > 1;
  }
  EXPECT_GT(mixed, 150);
  EXPECT_LT(mixed, 350);
  const StepAssignment s = a.Assign(7);
  EXPECT_EQ(s.sampler_cursor, 28u);  // 7 × batch_size
  EXPECT_EQ(s.sequences, 4);
  EXPECT_EQ(s.tokens, 128);
  EXPECT_NE(a.Assign(7).seed, a.Assign(8).seed);
}

}  // namespace
}  // namespace fullband
