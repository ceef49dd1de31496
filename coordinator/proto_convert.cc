#include "coordinator/proto_convert.h"

#include "common/check.h"
#include "proto/reflect_fields.h"

namespace fullband::coordinator {

proto::JobState ToProto(JobState state) {
  proto::JobState out = proto::JOB_STATE_UNSPECIFIED;
  const bool known = proto::JobState_Parse("JOB_STATE_" + JobStateName(state), &out);
  FB_CHECK(known) << "proto::JobState has no value for " << JobStateName(state);
  return out;
}

void ToProto(const JobInfo& job, proto::Job* out) { StructToProto(job, out); }

// A StepRecord on the wire says what its report said, not which incarnation sent it.
void ToProto(const HistoryPage& page, proto::GetJobHistoryResponse* out) {
  for (const auto& [step, record] : page.steps) {
    proto::StepRecord* r = out->add_steps();
    r->set_step(step);
    r->set_passes(record.passes);
    r->set_tokens(record.tokens);
    for (double loss : record.losses) r->add_losses(loss);
    r->set_step_seconds(record.step_seconds);
    r->set_unix_time(record.unix_time);
    r->set_attempt(record.attempt);
  }
  out->set_next_start_step(page.next_start_step);
}

}  // namespace fullband::coordinator
