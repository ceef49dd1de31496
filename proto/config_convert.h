// The one conversion between the Config aggregate (common/config.h) and its wire form
// (proto/config.proto). ToProto sets every field; FromProto keeps the default of every unset
// field and validates the result (INVALID_ARGUMENT naming the field, as config loading does).
#pragma once

#include "common/config.h"
#include "common/status.h"
#include "proto/config.pb.h"

namespace fullband {

proto::Config ToProto(const Config& config);
StatusOr<Config> FromProto(const proto::Config& message);
// FromProto's copy without the validation: every set field of `message` onto `config`.
// INVALID_ARGUMENT for an enum value this build does not know.
Status CopyFromProto(const proto::Config& message, Config& config);

}  // namespace fullband
