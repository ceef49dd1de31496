#include "proto/step_convert.h"

#include "common/check.h"
#include "proto/reflect_fields.h"

namespace fullband {

proto::StepAssignment ToProto(const StepAssignment& a) {
  proto::StepAssignment out;
  StructToProto(a, &out);
  return out;
}

StepAssignment FromProto(const proto::StepAssignment& m) {
  StepAssignment a;
  const Status read = ProtoToStruct(m, a);
  FB_CHECK(read.ok()) << read.ToString();  // no enums, no required entries: cannot fail
  return a;
}

}  // namespace fullband
