#include "worker/step_source.h"

#include <algorithm>
#include <cstring>

#include "coordinator/client.h"

namespace fullband::worker {

StatusOr<std::optional<StepAssignment>> LocalStepSource::Next() {
  if (next_ >= plan_.total_steps()) return std::optional<StepAssignment>();
  return std::optional<StepAssignment>(plan_.Assign(next_++));
}

namespace {

// What rank 0 broadcasts before every step: a step, the end, or an error. Plain bytes.
struct StepMessage {
  enum Kind : int32_t { kStep = 0, kEnd = 1, kError = 2 };
  int32_t kind = kStep;
  int32_t code = 0;  // StatusCode of kError
  int64_t step = 0, passes = 0, sequences = 0, tokens = 0;
  uint64_t sampler_cursor = 0, seed = 0;
  char text[512] = {};  // the stop reason or error message, cut to fit

  void SetText(const std::string& s) {
    const size_t n = std::min(s.size(), sizeof(text) - 1);
    std::memcpy(text, s.data(), n);
    text[n] = '\0';
  }
};

}  // namespace

StatusOr<std::optional<StepAssignment>> CoordinatorStepSource::Next() {
  StepMessage m;
  if (comm_->rank() == 0) {
    if (completed_) {
      m.kind = StepMessage::kEnd;
    } else if (client_->should_stop()) {
      m.kind = StepMessage::kEnd;
      m.SetText(client_->stop_reason());
    } else {
      StatusOr<std::optional<proto::StepAssignment>> next = client_->NextStep();
      if (!next.ok()) {
        m.kind = StepMessage::kError;
        m.code = static_cast<int32_t>(next.status().code());
        m.SetText("lease: " + next.status().message());
      } else if (!next->has_value()) {
        m.kind = StepMessage::kEnd;
      } else {
        const proto::StepAssignment& a = **next;
        m.step = a.step();
        m.passes = a.passes();
        m.sequences = a.sequences();
        m.tokens = a.tokens();
        m.sampler_cursor = a.sampler_cursor();
        m.seed = a.seed();
      }
    }
  }
  FB_RETURN_IF_ERROR(comm_->BroadcastAsync(&m, sizeof(m), 0)->Wait(lease_timeout_));
  if (m.kind == StepMessage::kError) {
    return Status(static_cast<StatusCode>(m.code), m.text);
  }
  if (m.kind == StepMessage::kEnd) {
    stop_reason_ = m.text;
    return std::optional<StepAssignment>();
  }
  StepAssignment a;
  a.step = m.step;
  a.passes = m.passes;
  a.sequences = m.sequences;
  a.tokens = m.tokens;
  a.sampler_cursor = m.sampler_cursor;
  a.seed = m.seed;
  return std::optional<StepAssignment>(a);
}

Status CoordinatorStepSource::Done(const StepAssignment& step, const std::vector<double>& pass_loss,
                                   double seconds) {
  if (comm_->rank() != 0) return OkStatus();
  proto::StepAssignment a;
  a.set_step(step.step);
  a.set_passes(step.passes);
  a.set_tokens(step.tokens);
  FB_ASSIGN_OR_RETURN(proto::ReportStepResponse r, client_->Report(a, pass_loss, seconds));
  if (r.job_completed()) completed_ = true;
  return OkStatus();
}

}  // namespace fullband::worker
