// StepPlan: the one definition of a training step — how many steps a budget allows and, for
// every step, the pass count, sampler cursor, seed and cost. A pure function of the Config, so
// a restarted coordinator, a re-lease and `fullband train` (which plans locally, without a
// coordinator) compute exactly the same assignments.
//
// Note [Budget fraction]: step s sits at budget fraction f(s) = cost[0, s) / budget.amount,
// where cost[0, s) is what steps 0..s-1 spend in the budget's unit (tokens; tokens × passes;
// or tokens × passes × model FLOPs per token), each with its own drawn pass count. The pass
// count of s is PassesAtFraction(schedule, f(s), s) (common/schedule.h). The plan holds the
// steps s with cost[0, s + 1) <= amount: the first step that would overrun the budget ends it.
// Step s reads sequences [s·B, (s + 1)·B) of the sampler's order (B = data.batch_size, the
// global batch; data-parallel rank r of dp reads the contiguous slice [r·B/dp, (r+1)·B/dp) of
// it); its seed, which seeds the step's jitter and prefix-mixin draws, is the first draw of an
// Rng (common/random.h) seeded by (data.seed, s).
#pragma once

#include <cstdint>
#include <vector>

#include "common/config.h"
#include "common/status.h"
#include "common/visit_fields.h"

namespace fullband {

struct StepAssignment {
  int64_t step = 0;
  int64_t passes = 1;
  uint64_t sampler_cursor = 0;  // first sequence index of the step
  int64_t sequences = 0;        // B
  uint64_t seed = 0;
  int64_t tokens = 0;  // B × T
  bool operator==(const StepAssignment&) const = default;
};

// Its fields, as proto::StepAssignment names them (common/visit_fields.h).
template <FieldsOf<StepAssignment> M, typename Visitor>
void VisitFields(M& a, Visitor&& visit) {
  visit("step", a.step);
  visit("passes", a.passes);
  visit("sampler_cursor", a.sampler_cursor);
  visit("sequences", a.sequences);
  visit("seed", a.seed);
  visit("tokens", a.tokens);
}

class StepPlan {
 public:
  // Largest number of steps one job may plan (1 byte per step is kept).
  static constexpr int64_t kMaxSteps = 50'000'000;

  // INVALID_ARGUMENT: budget.amount is 0 for a kind other than tokens, the budget does not fit
  // one step, or it allows more than kMaxSteps steps.
  static StatusOr<StepPlan> Create(const Config& config);

  int64_t total_steps() const { return static_cast<int64_t>(passes_.size()); }
  BudgetKind kind() const { return kind_; }
  double amount() const { return amount_; }  // in the budget's unit
  int64_t tokens_per_step() const { return tokens_per_step_; }
  double flops_per_token_pass() const { return flops_per_token_pass_; }

  // Requires 0 <= step < total_steps().
  StepAssignment Assign(int64_t step) const;
  int64_t Passes(int64_t step) const;
  // Model FLOPs of a step of `passes` passes.
  double StepFlops(int64_t passes) const;
  // What a step of `passes` passes spends in the budget's unit.
  double StepCost(int64_t passes) const;

 private:
  BudgetKind kind_ = BudgetKind::kTokens;
  double amount_ = 0;
  int64_t batch_size_ = 0;
  int64_t tokens_per_step_ = 0;
  double flops_per_token_pass_ = 0;
  uint64_t data_seed_ = 0;
  std::vector<uint8_t> passes_;  // per step
};

}  // namespace fullband
