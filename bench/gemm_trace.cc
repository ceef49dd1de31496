// gemm_trace: where a program's oneDNN GEMM time goes, shape by shape.
//
//   LD_PRELOAD=build/bench/libgemm_trace.so build/bench/train_step --config small --steps 2
//
// A preloaded library that stands in for dnnl_sgemm: it times every call, forwards it to the
// real one, and when the program exits prints one JSON line per distinct call (transposes,
// m, n, k, leading dimensions, whether it ran inside an OpenMP parallel region) to stderr,
// slowest total first, then a line with the total. Calls made inside a parallel region run on
// one thread each (the CPU backend's batched small products), so their seconds are thread
// seconds and their GFLOP/s a single thread's rate. GEMMs that the CPU backend runs with its
// own kernels (the long-K kernel) are not dnnl_sgemm calls and do not appear.
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

namespace {

using SgemmFn = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t,
                        const float*, int64_t, float, float*, int64_t);

struct Shape {
  char trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc;
  bool in_parallel;
  auto Tie() const { return std::tie(trans_a, trans_b, m, n, k, lda, ldb, ldc, in_parallel); }
  bool operator<(const Shape& o) const { return Tie() < o.Tie(); }
};

struct Totals {
  int64_t calls = 0;
  double seconds = 0;
};

// Leaked on purpose: calls may still arrive from other threads while static objects are
// destroyed at exit.
std::mutex& mu = *new std::mutex;
std::map<Shape, Totals>& calls = *new std::map<Shape, Totals>;

SgemmFn RealSgemm() {
  static const SgemmFn real = [] {
    auto fn = reinterpret_cast<SgemmFn>(dlsym(RTLD_NEXT, "dnnl_sgemm"));
    if (fn == nullptr) {
      std::fprintf(stderr, "gemm_trace: dnnl_sgemm not found after this library\n");
      std::abort();
    }
    return fn;
  }();
  return real;
}

__attribute__((destructor)) void Report() {
  std::lock_guard<std::mutex> lock(mu);
  std::vector<std::pair<Shape, Totals>> rows(calls.begin(), calls.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& x, const auto& y) { return x.second.seconds > y.second.seconds; });
  double total = 0;
  for (const auto& [s, t] : rows) {
    const double gflops = 2.0 * static_cast<double>(s.m) * s.n * s.k * t.calls / t.seconds / 1e9;
    std::fprintf(stderr,
                 "{\"bench\": \"gemm_trace\", \"trans\": \"%c%c\", \"m\": %ld, \"n\": %ld, "
                 "\"k\": %ld, \"lda\": %ld, \"ldb\": %ld, \"ldc\": %ld, \"in_parallel\": %s, "
                 "\"calls\": %ld, \"seconds\": %.4f, \"gflops\": %.1f}\n",
                 s.trans_a, s.trans_b, s.m, s.n, s.k, s.lda, s.ldb, s.ldc,
                 s.in_parallel ? "true" : "false", t.calls, t.seconds, gflops);
    total += t.seconds;
  }
  std::fprintf(stderr,
               "{\"bench\": \"gemm_trace\", \"summary\": true, \"shapes\": %zu, "
               "\"seconds\": %.4f}\n",
               rows.size(), total);
}

}  // namespace

extern "C" int dnnl_sgemm(char trans_a, char trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                          const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                          float* c, int64_t ldc) {
  const SgemmFn real = RealSgemm();
  const auto t0 = std::chrono::steady_clock::now();
  const int status = real(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Shape shape{trans_a, trans_b, m, n, k, lda, ldb, ldc, omp_in_parallel() != 0};
  std::lock_guard<std::mutex> lock(mu);
  Totals& t = calls[shape];
  ++t.calls;
  t.seconds += s;
  return status;
}
