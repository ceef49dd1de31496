// Backend creation. The CPU backend is linked in; the CUDA backend is a plugin
// (libfullband_cuda.so, ops/cuda/plugin.h) loaded on first use (Note [CUDA plugin] in
// ops/backend.h). CudaPluginSymbol hands its other entry points (the NCCL communicator's) to the
// layers above.
#include "ops/backend.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <mutex>
#include <string>
#include <vector>

#include "ops/cpu/cpu_backend.h"
#include "ops/cuda/plugin.h"

namespace fullband::ops {
namespace {

struct CudaPlugin {
  void* handle = nullptr;
  FullbandCudaDeviceAvailableFn available = nullptr;
  FullbandCudaCreateBackendFn create = nullptr;
  std::string error;  // why it could not be loaded
};

#if FULLBAND_HAVE_CUDA
std::string ExecutableDir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string path(buf, n);
  return path.substr(0, path.rfind('/'));
}
#endif

CudaPlugin LoadCudaPlugin([[maybe_unused]] const std::string& first) {
  CudaPlugin p;
#if FULLBAND_HAVE_CUDA
  std::vector<std::string> candidates;
  if (!first.empty()) candidates.push_back(first);
  const std::string dir = ExecutableDir();
  candidates.push_back(dir + "/" FULLBAND_CUDA_PLUGIN_FILE);
  candidates.push_back(dir + "/../ops/" FULLBAND_CUDA_PLUGIN_FILE);
  candidates.push_back(dir + "/../../ops/" FULLBAND_CUDA_PLUGIN_FILE);
  candidates.push_back(FULLBAND_CUDA_PLUGIN_BUILD_PATH);
  for (const std::string& path : candidates) {
    if (access(path.c_str(), R_OK) != 0) continue;
    p.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (p.handle == nullptr) {
      p.error = std::string("cannot load ") + path + ": " + dlerror();
      continue;
    }
    auto abi =
        reinterpret_cast<FullbandCudaPluginAbiFn>(dlsym(p.handle, "fullband_cuda_plugin_abi"));
    p.available = reinterpret_cast<FullbandCudaDeviceAvailableFn>(
        dlsym(p.handle, "fullband_cuda_device_available"));
    p.create = reinterpret_cast<FullbandCudaCreateBackendFn>(
        dlsym(p.handle, "fullband_cuda_create_backend"));
    if (abi == nullptr || p.available == nullptr || p.create == nullptr ||
        abi() != FULLBAND_CUDA_PLUGIN_ABI) {
      p.error = path + " is not a compatible fullband CUDA plugin";
      dlclose(p.handle);
      p.handle = nullptr;
      p.available = nullptr;
      p.create = nullptr;
      continue;
    }
    p.error.clear();
    return p;
  }
  if (p.error.empty()) p.error = "the CUDA plugin " FULLBAND_CUDA_PLUGIN_FILE " was not found";
#else
  p.error = "this fullband was built without CUDA (-DFULLBAND_CUDA=OFF)";
#endif
  return p;
}

// Note [CUDA plugin] in ops/backend.h: the first call loads it.
const CudaPlugin& Plugin(const std::string& first = {}) {
  static const CudaPlugin plugin = LoadCudaPlugin(first);
  return plugin;
}

}  // namespace

bool CudaAvailable(const std::string& cuda_plugin) {
  const CudaPlugin& p = Plugin(cuda_plugin);
  return p.available != nullptr && p.available() != 0;
}

StatusOr<void*> CudaPluginSymbol(const char* symbol) {
  const CudaPlugin& p = Plugin();
  if (p.handle == nullptr) return UnavailableError(p.error);
  void* found = dlsym(p.handle, symbol);
  if (found == nullptr) {
    return UnavailableError(std::string("the CUDA plugin has no entry point ") + symbol);
  }
  return found;
}

StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options) {
  if (options.num_threads < 0) {
    return InvalidArgumentError("backend num_threads must be >= 0, got " +
                                std::to_string(options.num_threads));
  }
  switch (options.device) {
    case Device::kCpu: {
      const cpu::SimdKernels* simd = &cpu::DefaultSimdKernels();
      if (!options.cpu_isa.empty()) {
        StatusOr<const cpu::SimdKernels*> chosen = cpu::SimdKernelsFor(options.cpu_isa);
        if (!chosen.ok()) return chosen.status();
        simd = *chosen;
      }
      return std::unique_ptr<Backend>(std::make_unique<cpu::CpuBackend>(options.num_threads, simd));
    }
    case Device::kCuda: {
      const CudaPlugin& p = Plugin(options.cuda_plugin);
      if (p.create == nullptr) return UnavailableError(p.error);
      int code = 0;
      char message[512] = {0};
      Backend* backend = p.create(options.device_index, &code, message, sizeof(message));
      if (backend == nullptr) return Status(static_cast<StatusCode>(code), message);
      return std::unique_ptr<Backend>(backend);
    }
  }
  return InvalidArgumentError("unknown device");
}

double MeasurePeakGflops(Backend& be) {
  const int64_t n = 2048;
  const size_t bytes = n * n * sizeof(float);
  void* a = be.Allocate(bytes).value();
  void* b = be.Allocate(bytes).value();
  void* c = be.Allocate(bytes).value();
  be.Fill(Tensor::F32(static_cast<float*>(a), {n * n}, be.device()), 0.5f);
  be.Fill(Tensor::F32(static_cast<float*>(b), {n * n}, be.device()), 0.25f);
  double best = 0;
  for (int i = 0; i < 4; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    be.Gemm(false, false, n, n, n, 1.0f, static_cast<float*>(a), n, static_cast<float*>(b), n, 0.0f,
            static_cast<float*>(c), n);
    be.Synchronize();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) best = std::max(best, 2.0 * n * n * n / seconds / 1e9);
  }
  be.Free(a);
  be.Free(b);
  be.Free(c);
  return best;
}

}  // namespace fullband::ops
