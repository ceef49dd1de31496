#include "common/step_plan.h"

#include <string>

#include "common/check.h"
#include "common/model_params.h"
#include "common/random.h"
#include "common/schedule.h"

namespace fullband {

StatusOr<StepPlan> StepPlan::Create(const Config& config) {
  StepPlan plan;
  plan.kind_ = config.budget.kind;
  plan.batch_size_ = config.data.batch_size;
  plan.tokens_per_step_ = config.data.batch_size * config.data.seq_len;
  plan.flops_per_token_pass_ =
      ModelFlopsPerToken(config.model, ModelParameterCount(config.model), config.data.seq_len);
  plan.data_seed_ = static_cast<uint64_t>(config.data.seed);
  plan.amount_ = config.budget.amount;
  if (plan.amount_ == 0) {
    if (plan.kind_ != BudgetKind::kTokens) {
      return InvalidArgumentError(std::string("budget.amount: required for budget.kind ") +
                                  std::string(BudgetKindName(plan.kind_)));
    }
    plan.amount_ = static_cast<double>(config.schedule.steps) * plan.tokens_per_step_;
  }
  // Relative slack so that a budget of exactly n steps is not lost to rounding.
  const double limit = plan.amount_ * (1 + 1e-12);
  double spent = 0;
  for (int64_t step = 0;; ++step) {
    const int64_t passes = PassesAtFraction(config.schedule, spent / plan.amount_, step);
    const double cost = plan.StepCost(passes);
    if (spent + cost > limit) break;
    if (step >= kMaxSteps) {
      return InvalidArgumentError("budget.amount: " + std::to_string(plan.amount_) +
                                  " allows more than " + std::to_string(kMaxSteps) + " steps");
    }
    spent += cost;
    plan.passes_.push_back(static_cast<uint8_t>(passes));
  }
  if (plan.passes_.empty()) {
    return InvalidArgumentError("budget.amount: " + std::to_string(plan.amount_) + " " +
                                std::string(BudgetKindName(plan.kind_)) + " does not fit one step");
  }
  return plan;
}

int64_t StepPlan::Passes(int64_t step) const {
  FB_CHECK(step >= 0 && step < total_steps()) << "step " << step << " outside the plan";
  return passes_[static_cast<size_t>(step)];
}

StepAssignment StepPlan::Assign(int64_t step) const {
  StepAssignment a;
  a.step = step;
  a.passes = Passes(step);
  a.sampler_cursor = static_cast<uint64_t>(step) * static_cast<uint64_t>(batch_size_);
  a.sequences = batch_size_;
  a.seed = Rng(data_seed_ * 0xD1B54A32D192ED03ull ^ static_cast<uint64_t>(step)).Next();
  a.tokens = tokens_per_step_;
  return a;
}

double StepPlan::StepFlops(int64_t passes) const {
  return static_cast<double>(tokens_per_step_) * static_cast<double>(passes) *
         flops_per_token_pass_;
}

double StepPlan::StepCost(int64_t passes) const {
  switch (kind_) {
    case BudgetKind::kTokens:
      return static_cast<double>(tokens_per_step_);
    case BudgetKind::kTokenEquivalents:
      return static_cast<double>(tokens_per_step_) * static_cast<double>(passes);
    case BudgetKind::kFlops:
      return StepFlops(passes);
  }
  return 0;
}

}  // namespace fullband
