// The StepAssignment <-> proto conversion: every field round-trips.
#include "proto/step_convert.h"

#include <gtest/gtest.h>

#include "tests/proto/fill_every_field.h"

namespace fullband {
namespace {

TEST(StepConvert, RoundTrip_PreservesEveryField) {
  testing::ExpectEveryFieldRoundTrips<proto::StepAssignment>(
      [](const proto::StepAssignment& every) { return ToProto(FromProto(every)); });
}

}  // namespace
}  // namespace fullband
