// Config <-> proto::Config by reflection over the field list of common/config_fields.h
// (proto/reflect_fields.h): a Config field and its proto field share a name.
#include "proto/config_convert.h"

#include "common/config_fields.h"
#include "proto/reflect_fields.h"

namespace fullband {

proto::Config ToProto(const Config& config) {
  proto::Config out;
  StructToProto(config, &out);
  return out;
}

Status CopyFromProto(const proto::Config& message, Config& config) {
  return ProtoToStruct(message, config);
}

StatusOr<Config> FromProto(const proto::Config& message) {
  Config config;
  FB_RETURN_IF_ERROR(CopyFromProto(message, config));
  FB_RETURN_IF_ERROR(config.Validate());
  return config;
}

}  // namespace fullband
