#include "ops/backend.h"

#include "ops/cpu/cpu_backend.h"
#if FULLBAND_HAVE_CUDA
#include "ops/cuda/cuda_backend.h"
#endif

namespace fullband::ops {

bool CudaAvailable() {
#if FULLBAND_HAVE_CUDA
  return CudaDeviceAvailable();
#else
  return false;
#endif
}

StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options) {
  if (options.num_threads < 0) {
    return InvalidArgumentError("backend num_threads must be >= 0, got " +
                                std::to_string(options.num_threads));
  }
  switch (options.device) {
    case Device::kCpu:
      return std::unique_ptr<Backend>(std::make_unique<cpu::CpuBackend>(options.num_threads));
    case Device::kCuda:
#if FULLBAND_HAVE_CUDA
      return CreateCudaBackend(options.device_index);
#else
      return UnavailableError("this fullband was built without CUDA (-DFULLBAND_CUDA=OFF)");
#endif
  }
  return InvalidArgumentError("unknown device");
}

}  // namespace fullband::ops
