// The interface between the CPU side and the CUDA plugin (ops/cuda/plugin.cc): symbol names and
// signatures, versioned by FULLBAND_CUDA_PLUGIN_ABI so that a stale plugin is refused. The
// plugin's objects cross it as C++ classes (ops::Backend, comm::Communicator) built from the
// same tree, so their headers are part of the ABI too: a plugin from another build is refused.
// ops/backend.cc loads the plugin; ops/nccl_communicator.cc looks up the NCCL entry points
// through ops::CudaPluginSymbol.
#pragma once

#include <cstddef>
#include <cstdint>

#define FULLBAND_CUDA_PLUGIN_ABI 3
#define FULLBAND_CUDA_PLUGIN_FILE "libfullband_cuda.so"
// The size of an NCCL unique id (NCCL_UNIQUE_ID_BYTES in nccl.h, checked by the plugin).
#define FULLBAND_NCCL_UNIQUE_ID_BYTES 128

namespace fullband::ops {
class Backend;
}
namespace fullband::comm {
class Communicator;
}

extern "C" {
// fullband_cuda_plugin_abi
using FullbandCudaPluginAbiFn = int (*)();
// fullband_cuda_device_available
using FullbandCudaDeviceAvailableFn = int (*)();
// fullband_cuda_create_backend: returns a new backend (ownership to the caller), or nullptr with
// *status_code a StatusCode and `message` the reason.
using FullbandCudaCreateBackendFn = fullband::ops::Backend* (*)(int device_index, int* status_code,
                                                                char* message, size_t message_len);
// fullband_cuda_nccl_unique_id: writes a new NCCL group id (ncclGetUniqueId; rank 0 of a new
// group calls it) into id[0, FULLBAND_NCCL_UNIQUE_ID_BYTES). Returns 0, or a StatusCode with
// `message` the reason.
using FullbandCudaNcclUniqueIdFn = int (*)(char* id, size_t id_len, char* message,
                                           size_t message_len);
// fullband_cuda_create_nccl_communicator: joins rank `rank` of the `size` ranks of the NCCL group
// `id` on the GPU and stream of `backend` (a CUDA backend from fullband_cuda_create_backend),
// waiting at most `timeout_ms` for the other ranks. Returns the communicator (ownership to the
// caller; `backend` must outlive it), or nullptr with *status_code and `message` as above.
using FullbandCudaCreateNcclCommunicatorFn =
    fullband::comm::Communicator* (*)(fullband::ops::Backend* backend, const char* id,
                                      size_t id_len, int rank, int size, int64_t timeout_ms,
                                      int* status_code, char* message, size_t message_len);
}
