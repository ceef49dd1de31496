// The C entry points of libfullband_cuda.so, the CUDA backend as a plugin: ops/backend.cc
// dlopens it only when a CUDA backend is asked for, so CPU-only processes never load the CUDA
// runtime and cuBLAS (about half a second per process start). Only these symbols are exported.
#include "ops/cuda/plugin.h"

#include <cstdio>
#include <cstring>

#include "ops/cuda/cuda_backend.h"

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
    *status_code = static_cast<int>(backend.status().code());
    std::snprintf(message, message_len, "%s", backend.status().message().c_str());
    return nullptr;
  }
  *status_code = 0;
  return std::move(backend).value().release();
}

}  // extern "C"
