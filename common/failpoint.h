// Failpoints: named places in fullband where a crash test can make the process die at once
// (SIGKILL, as a power cut or the OOM killer would), to prove that what it writes survives any
// crash (Note [Checkpoint commit] in checkpoint/sharded.h). Hit sits on rare paths only (a
// checkpoint's phases): it takes a mutex.
//
// One failpoint per process, armed by `fullband worker --failpoint NAME@STEP` (tests only); like
// RocksDB's TEST_SYNC_POINT it is process-wide state. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace fullband::failpoint {

// Arms `spec`, "NAME@STEP": Hit(NAME, STEP) kills the process. INVALID_ARGUMENT otherwise.
Status Arm(const std::string& spec);

// Kills the process when `name` at `step` is armed.
void Hit(std::string_view name, int64_t step);

}  // namespace fullband::failpoint
