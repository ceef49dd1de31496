// The per-job families of the coordinator's /metrics exposition (names in the .cc), written
// from JobInfo copies; the caller adds process and component metrics.
#pragma once

#include <vector>

#include "coordinator/coordinator.h"
#include "coordinator/metrics_http.h"

namespace fullband::coordinator {

void WriteJobMetrics(const std::vector<JobInfo>& jobs, PrometheusWriter& writer);

}  // namespace fullband::coordinator
