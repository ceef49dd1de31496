// Conversions between the coordinator's plain C++ types (coordinator.h) and their proto
// forms (proto/coordinator.proto), shared by the store records and the RPC adapter.
#pragma once

#include "coordinator/coordinator.h"
#include "proto/coordinator.pb.h"

namespace fullband::coordinator {

proto::JobState ToProto(JobState state);
// INVALID_ARGUMENT for UNSPECIFIED or an unknown value.
StatusOr<JobState> FromProto(proto::JobState state);
void ToProto(const Ledger& ledger, proto::Ledger* out);
Ledger FromProto(const proto::Ledger& ledger);
void ToProto(const JobInfo& job, proto::Job* out);

}  // namespace fullband::coordinator
