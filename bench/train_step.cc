// bench/train_step: fullband's K-pass training step (forward, backward through every pass,
// AdamW) on a named or given config; prints one JSON line:
//   {"impl": "fullband", "config": "tiny", "passes": K, "recompute": "none",
//    "tokens_per_s": …, "step_s_median": …, "peak_rss_mib": …, "mfu": …}
// plus "cpu_s_median", the process's CPU seconds per step (all threads): on a shared machine
// it moves less with the load than the wall time does.
// `train_step --help` lists the flags. The presets of --config: tiny: V=4096 D=256 L=4 H=4
// T=256 B=8; small: V=100352 D=512 L=8 H=8 T=512 B=4 (Hkv = H, F = 8D/3 rounded up to 64, no
// window). Tokens are random with an EOD every ~100. Run one measurement per process: peak RSS
// is the process's.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_cli.h"
#include "bench/bench_util.h"
#include "cli/options.h"
#include "common/config.h"
#include "common/config_fields.h"
#include "common/model_params.h"
#include "common/random.h"
#include "common/schedule.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "ops/backend.h"
#include "worker/trainer.h"

namespace fullband::bench {
namespace {

struct Named {
  ModelConfig model;
  int64_t batch, seq;
};

Named Preset(int64_t v, int64_t d, int64_t l, int64_t h, int64_t t, int64_t b) {
  Named n;
  ModelConfig& m = n.model;
  m.vocab_size = v;
  m.d_model = d;
  m.n_layers = l;
  m.n_heads = h;
  m.n_kv_heads = h;
  m.head_dim = d / h;
  m.ffn_dim = (8 * d / 3 + 63) / 64 * 64;
  m.window = 0;
  m.eod_id = v - 1;
  m.max_seq_len = std::max<int64_t>(t, 1024);
  n.batch = b;
  n.seq = t;
  return n;
}

StatusOr<Named> LoadNamed(const std::string& name) {
  if (name == "tiny") return Preset(4096, 256, 4, 4, 256, 8);
  if (name == "small") return Preset(100352, 512, 8, 8, 512, 4);
  FB_ASSIGN_OR_RETURN(Config c, LoadConfigFile(name));
  return Named{c.model, c.data.batch_size, c.data.seq_len};
}

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double PeakRssMib() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

struct Args {
  std::string config = "tiny";
  int64_t passes = 1, steps = 5, warmup = 2, threads = 0;
  Recompute recompute = Recompute::kNone;
  double peak_gflops = 0;
};

// The exit code when the command line says to stop: after --help, or bad usage.
std::optional<int> ParseArgs(int argc, char** argv, Args* a) {
  CommandLine cl("train_step", "fullband's K-pass training step; prints one JSON line.");
  cl.AddString("--config", &a->config, "tiny|small|FILE.yaml",
               "a preset (bench/train_step.cc) or a config file");
  cl.AddInt("--passes", &a->passes, "passes of the step", 1)->type_name("K");
  cli::OneOf(cl.app().add_option("--recompute", a->recompute, "activation recomputation"),
             kRecomputeNames)
      ->default_str(std::string(RecomputeName(a->recompute)));
  cl.AddInt("--steps", &a->steps, "timed steps, of which the median is reported", 1);
  cl.AddInt("--warmup", &a->warmup, "untimed steps before them", 0)->type_name("W");
  cl.AddInt("--threads", &a->threads, "the backend's threads (0: every core)", 0);
  cl.AddNumber("--peak-gflops", &a->peak_gflops,
               "the machine's peak, for the MFU (0 or less: measured with sgemm)");
  return cl.Parse(argc, argv);
}

// Random ids with an EOD about every 100 tokens, (b, t + 1).
std::vector<int32_t> RandomTokens(const ModelConfig& m, int64_t b, int64_t t) {
  Rng rng(7);
  std::vector<int32_t> tokens(b * (t + 1));
  for (auto& x : tokens) {
    x = rng.Below(100) == 0 ? static_cast<int32_t>(m.eod_id)
                            : static_cast<int32_t>(rng.Below(m.vocab_size - 1));
  }
  return tokens;
}

int Run(int argc, char** argv) {
  Args args;
  if (const std::optional<int> exit = ParseArgs(argc, argv, &args)) return *exit;
  StatusOr<Named> named = LoadNamed(args.config);
  if (!named.ok()) {
    std::fprintf(stderr, "train_step: %s\n", named.status().message().c_str());
    return 2;
  }
  ops::BackendOptions bo;
  bo.num_threads = static_cast<int>(args.threads);
  auto backend = ops::CreateBackend(bo);
  if (!backend.ok()) {
    std::fprintf(stderr, "train_step: %s\n", backend.status().message().c_str());
    return 1;
  }
  ops::Backend& be = **backend;
  const int64_t b = named->batch, t = named->seq;
  model::ModelShape shape{b, t, static_cast<int>(args.passes), args.recompute};
  auto model = model::Model::Create(named->model, shape, &be);
  if (!model.ok()) {
    std::fprintf(stderr, "train_step: %s\n", model.status().message().c_str());
    return 2;
  }
  (*model)->InitParameters(1);
  OptimConfig oc;
  oc.lr = 1e-3;
  oc.warmup_steps = 0;
  auto opt = model::AdamW::Create(oc, (*model)->table(), &be);
  if (!opt.ok()) return 1;
  const std::vector<int32_t> tokens = RandomTokens(named->model, b, t);
  model::StepOptions so;
  so.passes = static_cast<int>(args.passes);
  so.jitter = named->model.jitter;
  so.prefix_mixin = named->model.prefix_mixin;
  int64_t step = 0;
  std::vector<double> cpu_s;  // per step, warmup included
  const auto one_step = [&] {
    const double cpu0 = ProcessCpuSeconds();
    so.seed = static_cast<uint64_t>(step);
    (*model)->ZeroGradients();
    StatusOr<model::StepResult> r = (*model)->Step(tokens.data(), b, t, so);
    FB_CHECK(r.ok()) << r.status().ToString();
    (*opt)->Step((*model)->params(), (*model)->grads(), step, 1 << 30);
    be.Synchronize();
    ++step;
    cpu_s.push_back(ProcessCpuSeconds() - cpu0);
  };
  const double median =
      MedianSeconds(one_step, static_cast<int>(args.warmup), static_cast<int>(args.steps));
  const double cpu_median = Median(std::vector<double>(cpu_s.begin() + args.warmup, cpu_s.end()));
  // Read before the sgemm measurement below, whose three 2048² buffers would otherwise count.
  const double peak_rss_mib = PeakRssMib();
  double peak_gflops = args.peak_gflops;
  if (peak_gflops <= 0) peak_gflops = ops::MeasurePeakGflops(be);
  const double flops = ModelFlopsPerToken(named->model, ModelParameterCount(named->model), t) *
                       static_cast<double>(b * t * args.passes);
  std::printf(
      "{\"impl\": \"fullband\", \"config\": \"%s\", \"passes\": %ld, \"recompute\": \"%s\", "
      "\"batch\": %ld, \"seq\": %ld, \"tokens_per_s\": %.1f, \"step_s_median\": %.5f, "
      "\"cpu_s_median\": %.5f, "
      "\"peak_rss_mib\": %.1f, \"activation_mib\": %.1f, \"mfu\": %.4f, \"peak_gflops\": %.1f, "
      "\"backend\": \"%s\"}\n",
      args.config.c_str(), args.passes, std::string(RecomputeName(args.recompute)).c_str(), b, t,
      static_cast<double>(b * t) / median, median, cpu_median, peak_rss_mib,
      (*model)->activation_bytes() / 1048576.0, flops / median / (peak_gflops * 1e9), peak_gflops,
      be.name().c_str());
  return 0;
}

}  // namespace
}  // namespace fullband::bench

int main(int argc, char** argv) { return fullband::bench::Run(argc, argv); }
