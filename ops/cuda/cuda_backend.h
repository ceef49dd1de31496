// The CUDA implementation of ops::Backend (ops/backend.h): one GPU and one owned stream per
// backend, cuBLAS for Gemm (full fp32, no TF32), hand-written kernels for every other op.
// A plain C++ header (no CUDA includes), so that ops/backend.cc can call it from a .cc file;
// it is only compiled and linked when fullband is built with FULLBAND_CUDA.
#pragma once

#include <memory>

#include "common/status.h"
#include "ops/backend.h"

namespace fullband::ops {

// Creates a backend on GPU `device_index` (0-based, as CUDA_VISIBLE_DEVICES presents them).
// Errors: UNAVAILABLE when there is no NVIDIA driver or no device, when the index is out of
// range, or when this build has no kernels for the device's architecture (the message says
// which); INTERNAL when the CUDA runtime or cuBLAS fails to initialize.
StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device_index);

// True when the CUDA runtime sees at least one device. Never fails, never aborts.
bool CudaDeviceAvailable();

// The GPU and the stream of a backend made by CreateCudaBackend, for the parts of the plugin
// that enqueue work in order with its ops (ops/cuda/nccl_communicator.cc). Valid while the
// backend lives. INVALID_ARGUMENT when `backend` is not a CUDA backend of this plugin.
struct CudaBackendStream {
  int device = 0;
  void* stream = nullptr;  // its cudaStream_t
};
StatusOr<CudaBackendStream> CudaBackendStreamOf(Backend& backend);

}  // namespace fullband::ops
