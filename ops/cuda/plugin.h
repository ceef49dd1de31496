// The interface between ops/backend.cc and the CUDA plugin (ops/cuda/plugin.cc): symbol names
// and signatures, versioned by FULLBAND_CUDA_PLUGIN_ABI so that a stale plugin is refused.
#pragma once

#include <cstddef>

#define FULLBAND_CUDA_PLUGIN_ABI 1
#define FULLBAND_CUDA_PLUGIN_FILE "libfullband_cuda.so"

namespace fullband::ops {
class Backend;
}

extern "C" {
using FullbandCudaPluginAbiFn = int (*)();
using FullbandCudaDeviceAvailableFn = int (*)();
// Returns a new backend (ownership to the caller), or nullptr with *status_code a StatusCode and
// `message` the reason.
using FullbandCudaCreateBackendFn = fullband::ops::Backend* (*)(int device_index, int* status_code,
                                                                char* message, size_t message_len);
}
