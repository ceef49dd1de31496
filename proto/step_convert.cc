#include "proto/step_convert.h"

namespace fullband {

proto::StepAssignment ToProto(const StepAssignment& a) {
  proto::StepAssignment out;
  out.set_step(a.step);
  out.set_passes(a.passes);
  out.set_sampler_cursor(a.sampler_cursor);
  out.set_sequences(a.sequences);
  out.set_seed(a.seed);
  out.set_tokens(a.tokens);
  return out;
}

StepAssignment FromProto(const proto::StepAssignment& m) {
  StepAssignment a;
  a.step = m.step();
  a.passes = m.passes();
  a.sampler_cursor = m.sampler_cursor();
  a.sequences = m.sequences();
  a.seed = m.seed();
  a.tokens = m.tokens();
  return a;
}

}  // namespace fullband
