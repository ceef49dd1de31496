// The NCCL communicator inside the CUDA plugin: comm::Communicator (comm/communicator.h)
// over NCCL, on the GPU and stream of a CUDA backend. The CPU side reaches it only through the
// plugin's C entry points (ops/cuda/plugin.h), via ops::CreateNcclCommunicator
// (ops/nccl_communicator.h, which documents the contract). A plain C++ header: no CUDA or
// NCCL includes.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "common/status.h"
#include "ops/backend.h"

namespace fullband::ops {

// A new NCCL group id (ncclGetUniqueId), FULLBAND_NCCL_UNIQUE_ID_BYTES bytes, for rank 0 to
// hand to the others. UNAVAILABLE when NCCL cannot make one (no usable network interface).
StatusOr<std::string> NewNcclGroupId();

// Joins rank `rank` of the `size` ranks of group `id` on `backend`'s GPU and stream, waiting at
// most `timeout` for the others (which also becomes the communicator's timeout()). `backend`
// must outlive the communicator and its Work handles. Errors: INVALID_ARGUMENT for a backend
// that is not a CUDA backend, a malformed id or rank; DEADLINE_EXCEEDED when the group did not
// form in time; UNAVAILABLE / INTERNAL for NCCL's and CUDA's errors.
StatusOr<std::unique_ptr<comm::Communicator>> JoinNcclGroup(Backend& backend, const std::string& id,
                                                            int rank, int size,
                                                            std::chrono::milliseconds timeout);

}  // namespace fullband::ops
