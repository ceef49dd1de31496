// CpuBackend: memory, GEMM and construction. The ops live in the files named after them.
#include "ops/cpu/cpu_backend.h"

#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "ops/cpu/dnnl_call.h"

namespace fullband::ops::cpu {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kPage = 4096;

// Large blocks are mmapped (huge pages when the kernel allows) and first-touched in parallel
// here, once, instead of paying a page fault per 4 KiB inside the first training step.
void* MapAndPrefault(size_t bytes, int threads) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  madvise(p, bytes, MADV_HUGEPAGE);
  char* base = static_cast<char*>(p);
  const int64_t pages = static_cast<int64_t>((bytes + kPage - 1) / kPage);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < pages; ++i) base[i * kPage] = 0;
  return p;
}

char GemmTrans(bool t) { return t ? 'T' : 'N'; }

void GemmCall(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
              int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // C = beta·C, and beta = 0 ignores C's contents
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    }
    return;
  }
  FB_CALL_CHECK(dnnl_sgemm(GemmTrans(trans_a), GemmTrans(trans_b), m, n, k, alpha, a, lda, b, ldb,
                           beta, c, ldc));
}

}  // namespace

Scratch::~Scratch() {
  if (data_ != nullptr) munmap(data_, capacity_ * sizeof(float));
}

float* Scratch::Floats(size_t count) {
  if (count <= capacity_) return data_;
  if (data_ != nullptr) munmap(data_, capacity_ * sizeof(float));
  // Round up generously so that slowly growing requests do not remap every call.
  const size_t bytes = std::max(count * sizeof(float) * 5 / 4, size_t{1} << 20);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  FB_CHECK(p != MAP_FAILED) << "scratch allocation of " << bytes << " bytes failed";
  data_ = static_cast<float*>(p);
  capacity_ = bytes / sizeof(float);
  return data_;
}

void GemmSerial(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc) {
  // Inside an active parallel region oneDNN runs on the calling thread alone; but a region of
  // one thread (threads = 1) is not active, and there oneDNN would start a team of the process's
  // default size: every CPU of the affinity mask, which is the whole machine for a rank that no
  // one has bound (srun with task/none, mpirun --bind-to none). Set the size for the call.
  GemmThreaded(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 1);
}

void GemmThreaded(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                  int64_t ldc, int threads) {
  // oneDNN's sgemm runs on as many threads as the calling thread's OpenMP default
  // (omp_get_max_threads); that default is this call's count only while it runs, so neither the
  // caller nor the process keeps a setting made here.
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  GemmCall(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  omp_set_num_threads(before);
}

CpuBackend::CpuBackend(int num_threads, const SimdKernels* simd)
    : threads_(num_threads > 0
                   ? num_threads
                   : std::max(1, static_cast<int>(std::thread::hardware_concurrency()))),
      simd_(simd) {
  for (int i = 0; i < threads_ * kScratchSlots; ++i)
    scratch_.push_back(std::make_unique<Scratch>());
}

CpuBackend::~CpuBackend() {
  for (auto& [ptr, bytes] : sizes_) munmap(ptr, bytes);
}

std::string CpuBackend::name() const {
  return "cpu (" + std::string(simd_->isa) + ", " + std::to_string(threads_) +
         " threads, oneDNN sgemm + long-K kernel)";
}

Scratch& CpuBackend::ThreadScratch(int thread, int slot) {
  FB_CHECK(thread >= 0 && thread < threads_ && slot >= 0 && slot < kScratchSlots);
  return *scratch_[thread * kScratchSlots + slot];
}

StatusOr<void*> CpuBackend::Allocate(size_t bytes) {
  const size_t rounded =
      std::max<size_t>((bytes + kHugePage - 1) / kHugePage * kHugePage, kHugePage);
  void* p = MapAndPrefault(rounded, threads_);
  if (p == nullptr) {
    return ResourceExhaustedError("cpu: cannot allocate " + std::to_string(bytes) +
                                  " bytes: " + std::strerror(errno));
  }
  std::lock_guard<std::mutex> lock(alloc_mu_);
  sizes_[p] = rounded;
  return p;
}

void CpuBackend::Free(void* ptr) {
  if (ptr == nullptr) return;
  size_t bytes;
  {
    std::lock_guard<std::mutex> lock(alloc_mu_);
    auto it = sizes_.find(ptr);
    FB_CHECK(it != sizes_.end()) << "Free of a pointer this backend did not allocate";
    bytes = it->second;
    sizes_.erase(it);
  }
  munmap(ptr, bytes);
}

void CpuBackend::CopyFromHost(void* dst, const void* host_src, size_t bytes) {
  std::memcpy(dst, host_src, bytes);
}
void CpuBackend::CopyToHost(void* host_dst, const void* src, size_t bytes) {
  std::memcpy(host_dst, src, bytes);
}
void CpuBackend::Copy(void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }

void CpuBackend::Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
                      int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c,
                      int64_t batch) {
  FB_CHECK(m >= 0 && n >= 0 && k >= 0 && batch >= 0);
  FB_CHECK(lda >= std::max<int64_t>(1, trans_a ? m : k)) << "lda " << lda;
  FB_CHECK(ldb >= std::max<int64_t>(1, trans_b ? k : n)) << "ldb " << ldb;
  FB_CHECK(ldc >= std::max<int64_t>(1, n)) << "ldc " << ldc;
  FB_CHECK(batch <= 1 || stride_c != 0) << "batched GEMM with stride_c = 0 would race";
  if (batch == 1) {
    GemmOne(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Many small products: one per thread at a time. Few large ones: each uses every thread.
  const double flops = 2.0 * static_cast<double>(m) * n * k;
  if (batch >= threads_ && flops < 64.0e6) {
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (int64_t i = 0; i < batch; ++i) {
      GemmSerial(trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb,
                 beta, c + i * stride_c, ldc);
    }
  } else {
    for (int64_t i = 0; i < batch; ++i) {
      GemmOne(trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta,
              c + i * stride_c, ldc);
    }
  }
}

bool UsesLongKGemm(const SimdKernels& simd, bool trans_a, bool trans_b, int64_t m, int64_t n,
                   int64_t k) {
  return !trans_a && !trans_b && m > 0 && n % simd.gemm_nr == 0 && k >= 32 * std::max(m, n);
}

void CpuBackend::GemmOne(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                         const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                         float* c, int64_t ldc) {
  if (UsesLongKGemm(*simd_, trans_a, trans_b, m, n, k)) {
    float* pack = gemm_pack_.Floats(static_cast<size_t>(simd_->gemm_kc * n));
    simd_->gemm_long_k(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, pack, threads_);
    return;
  }
  GemmThreaded(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, threads_);
}

}  // namespace fullband::ops::cpu
