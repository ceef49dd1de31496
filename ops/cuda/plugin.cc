// The C entry points of libfullband_cuda.so, the CUDA backend and the NCCL communicator as a
// plugin: ops/backend.cc dlopens it only when a CUDA backend is asked for, so CPU-only processes
// never load the CUDA runtime, cuBLAS and NCCL (about half a second per process start). Only
// these symbols are exported (ops/cuda/plugin.h has their contracts).
#include "ops/cuda/plugin.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/nccl_communicator.h"

namespace {

// An error for the caller: its StatusCode, and its message in `message`.
int Report(const fullband::Status& status, char* message, size_t message_len) {
  std::snprintf(message, message_len, "%s", status.message().c_str());
  return static_cast<int>(status.code());
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int fullband_cuda_plugin_abi() {
  return FULLBAND_CUDA_PLUGIN_ABI;
}

__attribute__((visibility("default"))) int fullband_cuda_device_available() {
  return fullband::ops::CudaDeviceAvailable() ? 1 : 0;
}

__attribute__((visibility("default"))) fullband::ops::Backend* fullband_cuda_create_backend(
    int device_index, int* status_code, char* message, size_t message_len) {
  auto backend = fullband::ops::CreateCudaBackend(device_index);
  if (!backend.ok()) {
    *status_code = Report(backend.status(), message, message_len);
    return nullptr;
  }
  *status_code = 0;
  return std::move(backend).value().release();
}

__attribute__((visibility("default"))) int fullband_cuda_nccl_unique_id(char* id, size_t id_len,
                                                                        char* message,
                                                                        size_t message_len) {
  if (id_len < FULLBAND_NCCL_UNIQUE_ID_BYTES) {
    return Report(fullband::InvalidArgumentError("NCCL id buffer of " + std::to_string(id_len) +
                                                 " bytes is too small"),
                  message, message_len);
  }
  auto made = fullband::ops::NewNcclGroupId();
  if (!made.ok()) return Report(made.status(), message, message_len);
  std::memcpy(id, made->data(), FULLBAND_NCCL_UNIQUE_ID_BYTES);
  return 0;
}

__attribute__((visibility("default"))) fullband::comm::Communicator*
fullband_cuda_create_nccl_communicator(fullband::ops::Backend* backend, const char* id,
                                       size_t id_len, int rank, int size, int64_t timeout_ms,
                                       int* status_code, char* message, size_t message_len) {
  auto comm = fullband::ops::JoinNcclGroup(*backend, std::string(id, id_len), rank, size,
                                           std::chrono::milliseconds(timeout_ms));
  if (!comm.ok()) {
    *status_code = Report(comm.status(), message, message_len);
    return nullptr;
  }
  *status_code = 0;
  return std::move(comm).value().release();
}

}  // extern "C"
