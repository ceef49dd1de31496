#include "ops/nccl_communicator.h"

#include <string>
#include <utility>

#include "ops/cuda/plugin.h"

namespace fullband::ops {
namespace {

struct NcclEntryPoints {
  FullbandCudaNcclUniqueIdFn unique_id = nullptr;
  FullbandCudaCreateNcclCommunicatorFn create = nullptr;
};

// What this rank needs to take part: a CUDA backend, and the plugin's NCCL entry points.
// FAILED_PRECONDITION saying which is missing.
StatusOr<NcclEntryPoints> LocalEntryPoints(const ops::Backend& backend) {
  if (backend.device() != ops::Device::kCuda) {
    return FailedPreconditionError("needs a CUDA backend, and this rank's is " + backend.name());
  }
  StatusOr<void*> unique_id = ops::CudaPluginSymbol("fullband_cuda_nccl_unique_id");
  StatusOr<void*> create = ops::CudaPluginSymbol("fullband_cuda_create_nccl_communicator");
  for (const StatusOr<void*>* symbol : {&unique_id, &create}) {
    if (!symbol->ok()) return FailedPreconditionError(symbol->status().message());
  }
  NcclEntryPoints entry;
  entry.unique_id = reinterpret_cast<FullbandCudaNcclUniqueIdFn>(*unique_id);
  entry.create = reinterpret_cast<FullbandCudaCreateNcclCommunicatorFn>(*create);
  return entry;
}

// Rank 0's new NCCL group id on every rank, or rank 0's error.
StatusOr<std::string> GroupId(comm::Communicator& bootstrap, FullbandCudaNcclUniqueIdFn unique_id) {
  StatusOr<std::string> id = std::string();
  if (bootstrap.rank() == 0) {
    std::string bytes(FULLBAND_NCCL_UNIQUE_ID_BYTES, '\0');
    char message[1024] = {0};
    const int code = unique_id(bytes.data(), bytes.size(), message, sizeof(message));
    if (code == 0) {
      id = std::move(bytes);
    } else {
      id = Status(static_cast<StatusCode>(code), message);
    }
  }
  return comm::BroadcastResult(bootstrap, 0, id, bootstrap.timeout());
}

}  // namespace

StatusOr<std::unique_ptr<comm::Communicator>> CreateNcclCommunicator(comm::Communicator& bootstrap,
                                                                     ops::Backend& backend) {
  const std::string where = "NCCL communicator of rank " + std::to_string(bootstrap.rank()) +
                            " of " + std::to_string(bootstrap.size());
  const StatusOr<NcclEntryPoints> local = LocalEntryPoints(backend);
  // All ranks go on, or none: a rank that returned here alone would leave the others waiting
  // for it in the NCCL init until their timeout.
  int64_t unable = local.ok() ? 0 : 1;
  FB_RETURN_IF_ERROR(bootstrap.AllReduce(&unable, 1, comm::CommType::kI64, comm::ReduceOp::kMax)
                         .WithContext(where + ": agreeing to start"));
  if (!local.ok()) return local.status().WithContext(where);
  if (unable != 0) {
    return FailedPreconditionError(where + ": another rank cannot take part (its error says why)");
  }
  FB_ASSIGN_OR_RETURN(const std::string id, GroupId(bootstrap, local->unique_id));
  int code = 0;
  char message[1024] = {0};
  comm::Communicator* comm =
      local->create(&backend, id.data(), id.size(), bootstrap.rank(), bootstrap.size(),
                    bootstrap.timeout().count(), &code, message, sizeof(message));
  if (comm == nullptr) return Status(static_cast<StatusCode>(code), message);
  return std::unique_ptr<comm::Communicator>(comm);
}

}  // namespace fullband::ops
