// Conversions from the coordinator's plain C++ types (coordinator/job.h) to their wire forms
// (proto/coordinator.proto), for the RPC adapter. JobInfo travels by reflection over its
// VisitFields; the store's records have their own conversion (coordinator/job_store.cc).
#pragma once

#include "coordinator/job.h"
#include "proto/coordinator.pb.h"

namespace fullband::coordinator {

proto::JobState ToProto(JobState state);
void ToProto(const JobInfo& job, proto::Job* out);
void ToProto(const HistoryPage& page, proto::GetJobHistoryResponse* out);

}  // namespace fullband::coordinator
