#include "coordinator/job_metrics.h"

#include <string>

namespace fullband::coordinator {
namespace {

struct Family {
  const char* name;
  MetricType type;
  const char* help;
  double (*value)(const JobInfo&);
};

// Counted totals are gauges: a restart rolls them back (the rolled-back part moves to the
// wasted counters, which only grow).
const Family kFamilies[] = {
    {"fullband_job_tokens", MetricType::kGauge, "Tokens of the counted steps.",
     [](const JobInfo& j) { return static_cast<double>(j.ledger.tokens); }},
    {"fullband_job_token_equivalents", MetricType::kGauge,
     "Token-equivalents (tokens x passes) of the counted steps.",
     [](const JobInfo& j) { return static_cast<double>(j.ledger.token_equivalents); }},
    {"fullband_job_flops", MetricType::kGauge, "Model FLOPs of the counted steps.",
     [](const JobInfo& j) { return j.ledger.flops; }},
    {"fullband_job_steps", MetricType::kGauge, "Counted steps.",
     [](const JobInfo& j) { return static_cast<double>(j.ledger.steps); }},
    {"fullband_job_budget_amount", MetricType::kGauge, "The budget, in its unit.",
     [](const JobInfo& j) { return j.budget_amount; }},
    {"fullband_job_budget_remaining", MetricType::kGauge, "Budget not spent yet, in its unit.",
     [](const JobInfo& j) { return j.budget_amount - j.budget_spent; }},
    {"fullband_job_restarts_total", MetricType::kCounter, "Restarts of the job.",
     [](const JobInfo& j) { return static_cast<double>(j.restarts); }},
    {"fullband_job_wasted_steps_total", MetricType::kCounter, "Steps rolled back by restarts.",
     [](const JobInfo& j) { return static_cast<double>(j.ledger.wasted_steps); }},
    {"fullband_job_wasted_tokens_total", MetricType::kCounter,
     "Tokens of the steps rolled back by restarts.",
     [](const JobInfo& j) { return static_cast<double>(j.ledger.wasted_tokens); }},
    {"fullband_job_wasted_flops_total", MetricType::kCounter,
     "Model FLOPs of the steps rolled back by restarts.",
     [](const JobInfo& j) { return j.ledger.wasted_flops; }},
    {"fullband_job_tokens_per_second", MetricType::kGauge,
     "Tokens per second over the last 30 s of reports.",
     [](const JobInfo& j) { return j.tokens_per_second; }},
    {"fullband_job_wall_seconds", MetricType::kGauge, "Seconds since the first launch.",
     [](const JobInfo& j) { return j.ledger.wall_seconds; }},
};

// Not "job": Prometheus gives every scraped sample a `job` label of its own (the scrape job),
// and would rename this one to `exported_job`.
constexpr char kJobLabel[] = "job_id";

}  // namespace

void WriteJobMetrics(const std::vector<JobInfo>& jobs, PrometheusWriter& w) {
  for (const Family& f : kFamilies) {
    w.Family(f.name, f.type, f.help);
    for (const JobInfo& j : jobs) w.Sample({{kJobLabel, j.id}, {"owner", j.spec.owner}}, f.value(j));
  }
  w.Family("fullband_job_state", MetricType::kGauge, "1 for the job's current state.");
  for (const JobInfo& j : jobs) {
    w.Sample({{kJobLabel, j.id}, {"state", std::string(JobStateName(j.state))}}, 1);
  }
  w.Family("fullband_job_last_loss", MetricType::kGauge,
           "Loss of each pass of the last counted step.");
  for (const JobInfo& j : jobs) {
    for (size_t k = 0; k < j.ledger.last_losses.size(); ++k) {
      w.Sample({{kJobLabel, j.id}, {"pass", std::to_string(k + 1)}}, j.ledger.last_losses[k]);
    }
  }
  w.Family("fullband_job_pass_steps", MetricType::kGauge, "Counted steps by pass count.");
  for (const JobInfo& j : jobs) {
    for (const auto& [passes, n] : j.ledger.pass_histogram) {
      w.Sample({{kJobLabel, j.id}, {"passes", std::to_string(passes)}}, static_cast<double>(n));
    }
  }
}

}  // namespace fullband::coordinator
