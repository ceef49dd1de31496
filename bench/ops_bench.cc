// bench/ops: throughput of the op library against baselines measured in the same run.
//
// Prints one JSON object per line:
//  - GEMM GFLOP/s of the fullband CPU backend at 1024³/2048³/4096³ (and every transpose pair at
//    2048³), next to OpenBLAS as this environment configures it (OPENBLAS_CORETYPE as set),
//    OpenBLAS forced to its AVX-512 kernels (OPENBLAS_CORETYPE=SkylakeX, in a child process,
//    since OpenBLAS reads the variable once at load; null on a CPU without AVX-512), and
//    oneDNN's sgemm called directly;
//  - the readout's long-K GEMM (dlogits · E on small) against oneDNN's sgemm, alternating;
//  - causal GQA attention forward+backward GFLOP/s (useful causal FLOPs only) and its ratio to
//    the backend's 2048³ GEMM rate;
//  - cross-entropy forward+backward over V = 100,352: effective GB/s and the ratio to a
//    STREAM-like copy of the same bytes.
// Flags: --device cpu|cuda (default cpu; on cuda the GEMM rows have no CPU baselines),
//        --threads N (default: all cores), --quick (smaller sizes, fewer repeats),
//        --only gemm|gemm_long_k|attention|cross_entropy (one bench),
//        --openblas-child (internal: print only OpenBLAS GEMM lines).
#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "ops/backend.h"
#include "ops/readout_loss.h"

extern char** environ;

namespace fullband::bench {
namespace {

using ops::Backend;
using ops::Tensor;

struct Options {
  ops::Device device = ops::Device::kCpu;
  int threads = 0;
  bool quick = false;
  bool openblas_child = false;
  std::string only;  // one bench by name; empty: all
};

std::vector<float> RandomVector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

int Reps(int64_t n, bool quick) {
  if (quick) return 3;
  return n >= 4096 ? 5 : 11;
}

double GemmGflops(int64_t n, double seconds) { return 2.0 * n * n * n / seconds / 1e9; }

// A rate as a JSON value: null when it was not measured (0).
std::string JsonRate(double gflops) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", gflops);
  return gflops > 0 ? buf : "null";
}

// The baseline child: OpenBLAS as loaded in this process.
void RunOpenBlasGemms(const Options& opt, const std::vector<int64_t>& sizes, const char* label) {
  for (int64_t n : sizes) {
    std::vector<float> a = RandomVector(n * n, 1), b = RandomVector(n * n, 2), c(n * n);
    const double s = MedianSeconds(
        [&] {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n,
                      b.data(), n, 0.0f, c.data(), n);
        },
        1, Reps(n, opt.quick));
    std::printf(
        "{\"bench\": \"gemm\", \"impl\": \"%s\", \"m\": %ld, \"n\": %ld, \"k\": %ld, "
        "\"trans\": \"NN\", \"seconds_median\": %.6f, \"gflops\": %.1f}\n",
        label, n, n, n, s, GemmGflops(n, s));
  }
  std::fflush(stdout);
}

// Runs this program again as `--openblas-child` with OPENBLAS_CORETYPE = coretype (nullptr:
// the environment's value untouched) and returns its output lines: none if the child failed
// (OpenBLAS's AVX-512 kernels die of SIGILL on a CPU without AVX-512).
std::string SpawnOpenBlasChild(const char* self, const Options& opt, const char* coretype,
                               const char* label) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (coretype != nullptr && std::strncmp(*e, "OPENBLAS_CORETYPE=", 18) == 0) continue;
    if (std::strncmp(*e, "OPENBLAS_NUM_THREADS=", 21) == 0) continue;
    env_strings.emplace_back(*e);
  }
  if (coretype != nullptr) env_strings.push_back(std::string("OPENBLAS_CORETYPE=") + coretype);
  env_strings.push_back("OPENBLAS_NUM_THREADS=" + std::to_string(opt.threads));
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string threads = std::to_string(opt.threads);
  std::vector<const char*> argv = {self, "--openblas-child", label, "--threads", threads.c_str()};
  if (opt.quick) argv.push_back("--quick");
  argv.push_back(nullptr);

  int fds[2];
  if (pipe(fds) != 0) return "";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  pid_t pid;
  const int rc = posix_spawn(&pid, self, &actions, nullptr, const_cast<char* const*>(argv.data()),
                             envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  std::string out;
  if (rc == 0) {
    char buf[4096];
    ssize_t got;
    while ((got = read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, got);
    int status;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "ops_bench: the OpenBLAS child %s failed (status %d); no %s rates\n",
                   label, status, label);
      out.clear();
    }
  }
  close(fds[0]);
  return out;
}

// The GFLOP/s of size n in a child's lines; 0 if it printed none.
double ParseGflops(const std::string& lines, int64_t n) {
  const std::string key = "\"m\": " + std::to_string(n) + ",";
  size_t start = 0;
  while (start < lines.size()) {
    size_t end = lines.find('\n', start);
    if (end == std::string::npos) end = lines.size();
    const std::string line = lines.substr(start, end - start);
    if (line.find(key) != std::string::npos) {
      const size_t g = line.find("\"gflops\": ");
      if (g != std::string::npos) return std::atof(line.c_str() + g + 10);
    }
    start = end + 1;
  }
  return 0.0;
}

class Device {
 public:
  explicit Device(Backend* backend) : backend_(backend) {}
  ~Device() {
    for (void* p : owned_) backend_->Free(p);
  }
  Tensor Upload(const std::vector<float>& host, ops::Shape shape) {
    Tensor t = Alloc(ops::DType::kF32, shape);
    backend_->CopyFromHost(t.data, host.data(), t.bytes());
    return t;
  }
  Tensor Alloc(ops::DType dtype, ops::Shape shape) {
    const size_t bytes = shape.numel() * ops::DTypeSize(dtype);
    void* p = backend_->Allocate(bytes).value();
    owned_.push_back(p);
    return Tensor(p, dtype, shape, backend_->device());
  }

 private:
  Backend* backend_;
  std::vector<void*> owned_;
};

double BackendGemm(Backend* be, const Options& opt, int64_t m, int64_t n, int64_t k, bool ta,
                   bool tb) {
  Device dev(be);
  Tensor a = dev.Upload(RandomVector(m * k, 3), {m, k});
  Tensor b = dev.Upload(RandomVector(k * n, 4), {k, n});
  Tensor c = dev.Alloc(ops::DType::kF32, {m, n});
  const int64_t lda = ta ? m : k, ldb = tb ? k : n;
  const double s = MedianSeconds(
      [&] {
        be->Gemm(ta, tb, m, n, k, 1.0f, a.f32(), lda, b.f32(), ldb, 0.0f, c.f32(), n);
        be->Synchronize();
      },
      3, Reps(std::max({m, n, k}), opt.quick));
  return 2.0 * m * n * k / s / 1e9;
}

double DnnlGemm(const Options& opt, int64_t n) {
  std::vector<float> a = RandomVector(n * n, 1), b = RandomVector(n * n, 2), c(n * n);
  const double s = MedianSeconds(
      [&] { dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n); }, 1,
      Reps(n, opt.quick));
  return GemmGflops(n, s);
}

void BenchGemm(Backend* be, const Options& opt, const char* self) {
  const std::vector<int64_t> sizes =
      opt.quick ? std::vector<int64_t>{512, 1024} : std::vector<int64_t>{1024, 2048, 4096};
  const std::string env_blas = SpawnOpenBlasChild(self, opt, nullptr, "openblas_env");
  const std::string avx512_blas = SpawnOpenBlasChild(self, opt, "SkylakeX", "openblas_skylakex");
  std::fputs(env_blas.c_str(), stdout);
  std::fputs(avx512_blas.c_str(), stdout);
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  for (int64_t n : sizes) {
    const double fb = BackendGemm(be, opt, n, n, n, false, false);
    const double dnnl = DnnlGemm(opt, n);
    const double ob_env = ParseGflops(env_blas, n);
    const double ob_512 = ParseGflops(avx512_blas, n);
    const double best = std::max({dnnl, ob_env, ob_512});
    std::printf(
        "{\"bench\": \"gemm\", \"impl\": \"fullband\", \"m\": %ld, \"n\": %ld, \"k\": %ld, "
        "\"trans\": \"NN\", \"gflops\": %.1f, \"baseline_dnnl_gflops\": %.1f, "
        "\"baseline_openblas_env_gflops\": %s, \"openblas_coretype_env\": \"%s\", "
        "\"baseline_openblas_skylakex_gflops\": %s, \"best_baseline_gflops\": %.1f, "
        "\"ratio_to_best\": %.3f}\n",
        n, n, n, fb, dnnl, JsonRate(ob_env).c_str(), coretype ? coretype : "",
        JsonRate(ob_512).c_str(), best, fb / best);
    std::fflush(stdout);
  }
  const int64_t n = opt.quick ? 512 : 2048;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 2, tb = t & 1;
    const double fb = BackendGemm(be, opt, n, n, n, ta, tb);
    std::printf(
        "{\"bench\": \"gemm\", \"impl\": \"fullband\", \"m\": %ld, \"n\": %ld, \"k\": %ld, "
        "\"trans\": \"%c%c\", \"gflops\": %.1f}\n",
        n, n, n, ta ? 'T' : 'N', tb ? 'T' : 'N', fb);
    std::fflush(stdout);
  }
}

// The readout's dh = dlogits · E on small (a 128-row chunk, V = 100,352 at the logits pitch,
// D = 512): the backend (its long-K kernel) against oneDNN's sgemm on the same buffers,
// alternating, one ratio per round.
void BenchLongKGemm(Backend* be, const Options& opt) {
  const int64_t m = 128, n = 512, k = opt.quick ? 16384 : 100352, lda = ops::LogitsPitch(k);
  Device dev(be);
  Tensor a = dev.Upload(RandomVector(m * lda, 3, 1e-3f), {m, lda});
  Tensor b = dev.Upload(RandomVector(k * n, 4), {k, n});
  Tensor c = dev.Alloc(ops::DType::kF32, {m, n});
  std::vector<double> fb, dnnl;
  const int rounds = opt.quick ? 3 : 9;
  for (int r = 0; r <= rounds; ++r) {  // round 0 warms up
    const double s_fb = Seconds(
        [&] { be->Gemm(false, false, m, n, k, 1.0f, a.f32(), lda, b.f32(), n, 0.0f, c.f32(), n); });
    const double s_dnnl = Seconds(
        [&] { dnnl_sgemm('N', 'N', m, n, k, 1.0f, a.f32(), lda, b.f32(), n, 0.0f, c.f32(), n); });
    if (r == 0) continue;
    fb.push_back(s_fb);
    dnnl.push_back(s_dnnl);
  }
  const double flop = 2.0 * m * n * k;
  const RoundRatio ratio = RoundRatios(dnnl, fb);
  std::printf(
      "{\"bench\": \"gemm_long_k\", \"impl\": \"fullband\", \"m\": %ld, \"n\": %ld, \"k\": %ld, "
      "\"lda\": %ld, \"trans\": \"NN\", \"gflops\": %.1f, \"baseline_dnnl_gflops\": %.1f, "
      "\"speedup_median\": %.3f, \"speedup_min\": %.3f, \"speedup_max\": %.3f}\n",
      m, n, k, lda, flop / Median(fb) / 1e9, flop / Median(dnnl) / 1e9, ratio.median, ratio.min,
      ratio.max);
  std::fflush(stdout);
}

void BenchAttention(Backend* be, const Options& opt, double gemm_gflops, int64_t window) {
  const int64_t b = opt.quick ? 1 : 2, t = opt.quick ? 512 : 1024, h = 16, hkv = 8, dh = 96;
  Device dev(be);
  Tensor q = dev.Upload(RandomVector(b * t * h * dh, 5), {b, t, h, dh});
  Tensor k = dev.Upload(RandomVector(b * t * hkv * dh, 6), {b, t, hkv, dh});
  Tensor v = dev.Upload(RandomVector(b * t * hkv * dh, 7), {b, t, hkv, dh});
  Tensor dout = dev.Upload(RandomVector(b * t * h * dh, 8), {b, t, h, dh});
  Tensor out = dev.Alloc(ops::DType::kF32, {b, t, h, dh});
  Tensor lse = dev.Alloc(ops::DType::kF32, {b, h, t});
  Tensor dq = dev.Alloc(ops::DType::kF32, {b, t, h, dh});
  Tensor dk = dev.Alloc(ops::DType::kF32, {b, t, hkv, dh});
  Tensor dv = dev.Alloc(ops::DType::kF32, {b, t, hkv, dh});
  ops::AttentionOptions ao;
  ao.window = window;
  const double fwd = MedianSeconds(
      [&] {
        be->AttentionForward(out, lse, q, k, v, ao);
        be->Synchronize();
      },
      1, opt.quick ? 3 : 9);
  const double fwdbwd = MedianSeconds(
      [&] {
        be->AttentionForward(out, lse, q, k, v, ao);
        be->AttentionBackward(dq, dk, dv, dout, q, k, v, out, lse, ao);
        be->Synchronize();
      },
      1, opt.quick ? 3 : 9);
  // Useful FLOPs: visible (query, key) pairs × Dh × 2 per GEMM; 2 GEMMs forward (QKᵀ, PV) and
  // 4 backward (dP, dQ, dK, dV). The recomputation of QKᵀ in backward is not counted.
  double pairs = 0;
  for (int64_t i = 0; i < t; ++i) pairs += window > 0 ? std::min<int64_t>(i + 1, window) : i + 1;
  const double unit = 2.0 * pairs * dh * b * h;
  const double gf = 6.0 * unit / fwdbwd / 1e9;
  std::printf(
      "{\"bench\": \"attention\", \"impl\": \"fullband\", \"B\": %ld, \"T\": %ld, \"H\": %ld, "
      "\"Hkv\": %ld, \"Dh\": %ld, \"window\": %ld, \"fwd_seconds_median\": %.6f, "
      "\"fwd_gflops\": %.1f, \"fwdbwd_seconds_median\": %.6f, \"fwdbwd_gflops\": %.1f, "
      "\"gemm_gflops\": %.1f, \"ratio_to_gemm\": %.3f}\n",
      b, t, h, hkv, dh, window, fwd, 2.0 * unit / fwd / 1e9, fwdbwd, gf, gemm_gflops,
      gf / gemm_gflops);
  std::fflush(stdout);
}

void BenchCrossEntropy(Backend* be, const Options& opt) {
  const int64_t n = opt.quick ? 64 : 256, v = 100352;
  Device dev(be);
  const std::vector<float> host = RandomVector(n * v, 9, 4.0f);
  Tensor logits = dev.Upload(host, {n, v});
  Tensor grad = dev.Alloc(ops::DType::kF32, {n, v});
  Tensor loss = dev.Alloc(ops::DType::kF32, {n});
  Tensor lse = dev.Alloc(ops::DType::kF32, {n});
  std::vector<int32_t> tg(n);
  for (int64_t i = 0; i < n; ++i) tg[i] = static_cast<int32_t>((i * 7919) % v);
  Tensor targets = dev.Alloc(ops::DType::kI32, {n});
  be->CopyFromHost(targets.data, tg.data(), targets.bytes());
  const int reps = opt.quick ? 3 : 11;
  const double ce = MedianSeconds(
      [&] {
        be->CrossEntropyForward(loss, lse, logits, v, targets, -1);
        be->CrossEntropyBackward(grad, logits, v, lse, targets, 1.0f / n, 1e-5f / n, -1);
        be->Synchronize();
      },
      1, reps);
  const double copy = MedianSeconds(
      [&] {
        be->Copy(grad.data, logits.data, logits.bytes());
        be->Synchronize();
      },
      1, reps);
  const double bytes = static_cast<double>(logits.bytes());
  // Forward reads the logits once; backward reads them again and writes the gradient.
  const double ce_gbs = 3.0 * bytes / ce / 1e9;
  const double copy_gbs = 2.0 * bytes / copy / 1e9;
  std::printf(
      "{\"bench\": \"cross_entropy\", \"impl\": \"fullband\", \"N\": %ld, \"V\": %ld, "
      "\"fwdbwd_seconds_median\": %.6f, \"rows_per_s\": %.0f, \"effective_gbs\": %.2f, "
      "\"copy_seconds_median\": %.6f, \"copy_gbs\": %.2f, \"ratio_to_copy_bandwidth\": %.3f, "
      "\"time_ratio_to_copy\": %.3f}\n",
      n, v, ce, n / ce, ce_gbs, copy, copy_gbs, ce_gbs / copy_gbs, ce / copy);
  std::fflush(stdout);
}

int Main(int argc, char** argv) {
  Options opt;
  const char* child_label = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads" && i + 1 < argc) {
      opt.threads = std::atoi(argv[++i]);
    } else if (arg == "--device" && i + 1 < argc) {
      const std::string d = argv[++i];
      if (d != "cpu" && d != "cuda") {
        std::fprintf(stderr, "ops_bench: --device must be cpu or cuda, got '%s'\n", d.c_str());
        return 2;
      }
      opt.device = d == "cuda" ? ops::Device::kCuda : ops::Device::kCpu;
    } else if (arg == "--quick") {
      opt.quick = true;
    } else if (arg == "--only" && i + 1 < argc) {
      opt.only = argv[++i];
      if (opt.only != "gemm" && opt.only != "gemm_long_k" && opt.only != "attention" &&
          opt.only != "cross_entropy") {
        std::fprintf(stderr,
                     "ops_bench: --only must be gemm, gemm_long_k, attention or cross_entropy, "
                     "got '%s'\n",
                     opt.only.c_str());
        return 2;
      }
    } else if (arg == "--openblas-child" && i + 1 < argc) {
      opt.openblas_child = true;
      child_label = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--device cpu|cuda] [--threads N] [--quick] [--only BENCH]\n",
                   argv[0]);
      return 2;
    }
  }
  if (opt.threads <= 0) opt.threads = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  // The oneDNN baselines below call dnnl_sgemm directly, which runs on the OpenMP default's
  // threads: the same count as the backend's.
  omp_set_num_threads(opt.threads);
  const std::vector<int64_t> sizes =
      opt.quick ? std::vector<int64_t>{512, 1024} : std::vector<int64_t>{1024, 2048, 4096};
  if (opt.openblas_child) {
    RunOpenBlasGemms(opt, sizes, child_label);
    return 0;
  }
  ops::BackendOptions bo;
  bo.device = opt.device;
  bo.num_threads = opt.threads;
  auto backend = ops::CreateBackend(bo);
  if (!backend.ok()) {
    std::fprintf(stderr, "ops_bench: %s\n", backend.status().ToString().c_str());
    return 1;
  }
  Backend* be = backend->get();
  std::printf("{\"bench\": \"machine\", \"cpu\": \"%s\", \"threads\": %d, \"backend\": \"%s\"}\n",
              CpuModel().c_str(), opt.threads, be->name().c_str());
  const auto want = [&](const char* bench) { return opt.only.empty() || opt.only == bench; };
  if (opt.device == ops::Device::kCpu) {
    if (want("gemm")) BenchGemm(be, opt, argv[0]);
    if (want("gemm_long_k")) BenchLongKGemm(be, opt);
  } else if (want("gemm")) {
    for (int64_t n : sizes) {  // cuBLAS is the GEMM here; no CPU baseline applies
      std::printf(
          "{\"bench\": \"gemm\", \"impl\": \"fullband\", \"device\": \"cuda\", "
          "\"m\": %ld, \"n\": %ld, \"k\": %ld, \"trans\": \"NN\", \"gflops\": %.1f}\n",
          n, n, n, BackendGemm(be, opt, n, n, n, false, false));
    }
  }
  if (want("attention")) {
    const int64_t g = opt.quick ? 1024 : 2048;
    const double gemm_ref = BackendGemm(be, opt, g, g, g, false, false);
    BenchAttention(be, opt, gemm_ref, 0);
    BenchAttention(be, opt, gemm_ref, 256);
  }
  if (want("cross_entropy")) BenchCrossEntropy(be, opt);
  return 0;
}

}  // namespace
}  // namespace fullband::bench

int main(int argc, char** argv) { return fullband::bench::Main(argc, argv); }
