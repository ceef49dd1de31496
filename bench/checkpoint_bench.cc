// bench/checkpoint_bench: sharded checkpoints of the README demo's model (scripts/demo/train.yaml:
// V=100352 D=256 L=4, 26.5M parameters: 345 MB of parameters and AdamW moments), each against a
// baseline measured in the same round, median over --reps rounds; prints one JSON line.
//   save:  Save → every shard written and fsynced, manifest, rename, fsync (one rank), against
//          `dd if=/dev/zero bs=4M conv=fdatasync` of as many bytes into the same directory;
//   stall: the step's pause for a save (the snapshot into host buffers) against one memcpy of
//          the rank's state into a buffer already touched, and against the model's K=1 step
//          (the demo's B and T) — the pause as a fraction of a small-config step;
//   load:  Restore of a one-rank checkpoint at one rank (files in the page cache), and of the
//          same state written by a DP2 + ZeRO-1 group (reshard) against it.
// `checkpoint_bench --help` lists the flags. The default --dir is under the working directory,
// not /tmp, which may be a tmpfs.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_cli.h"
#include "bench/bench_util.h"
#include "comm/in_process_communicator.h"
#include "common/config.h"
#include "common/random.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "worker/checkpointer.h"

namespace fullband::bench {
namespace {

namespace fs = std::filesystem;
using worker::Checkpointer;

// The README demo's config (scripts/demo/train.yaml): its model, batch and sequence length.
Config DemoConfig() {
  StatusOr<Config> c =
      LoadConfigFile(std::string(FULLBAND_SOURCE_DIR) + "/scripts/demo/train.yaml");
  if (!c.ok()) {
    std::fprintf(stderr, "checkpoint_bench: %s\n", c.status().ToString().c_str());
    std::exit(1);
  }
  return *c;
}

// One rank's model, optimizer (moments filled) and checkpointer over `comm`.
struct Rank {
  std::unique_ptr<ops::Backend> backend;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<model::AdamW> optimizer;
  std::unique_ptr<Checkpointer> checkpointer;
};

Rank MakeRank(const Config& config, comm::Communicator* comm, int dp, bool zero1,
              const std::string& root, int threads) {
  Rank r;
  ops::BackendOptions bo;
  bo.num_threads = threads;
  r.backend = ops::CreateBackend(bo).value();
  model::ModelShape shape;
  shape.max_batch = config.data.batch_size;
  shape.max_seq = config.data.seq_len;
  if (zero1) shape.param_multiple = 16 * dp;
  r.model = model::Model::Create(config.model, shape, r.backend.get()).value();
  r.model->InitParameters(1);
  const int64_t total = r.model->params().numel();
  const int64_t begin = zero1 ? total / dp * comm->rank() : 0;
  const int64_t end = zero1 ? begin + total / dp : -1;
  r.optimizer =
      model::AdamW::Create(OptimConfig(), r.model->table(), r.backend.get(), begin, end).value();
  Rng rng(7 + comm->rank());
  for (ops::Tensor t : {r.optimizer->m(), r.optimizer->v()}) {
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(rng.Uniform());
  }
  Checkpointer::Options o;
  o.root = root;
  r.checkpointer =
      Checkpointer::Create(o, r.model.get(), r.optimizer.get(), comm, comm->rank(), dp).value();
  return r;
}

checkpoint::TrainingState StateAt(int64_t step, int dp, bool zero1) {
  checkpoint::TrainingState s;
  s.step = step;
  s.total_steps = 1000;
  s.dp = dp;
  s.zero1 = zero1;
  return s;
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.file_size();
  return n;
}

double DdSeconds(const std::string& dir, uint64_t bytes) {
  const std::string file = dir + "/dd.bin";
  const std::string cmd = "dd if=/dev/zero of=" + file +
                          " bs=4M count=" + std::to_string((bytes + (4 << 20) - 1) >> 22) +
                          " conv=fdatasync status=none";
  const double s = Seconds([&] {
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "checkpoint_bench: dd failed\n");
  });
  fs::remove(file);
  return s;
}

// The model's K=1 training step on random tokens at the config's B and T: forward, backward,
// AdamW.
double StepSeconds(const Config& config, Rank& r) {
  const int64_t b = config.data.batch_size, t = config.data.seq_len;
  std::vector<int32_t> tokens(b * (t + 1));
  Rng rng(3);
  for (int32_t& id : tokens) id = static_cast<int32_t>(rng.Next() % config.model.vocab_size);
  model::StepOptions o;
  return MedianSeconds(
      [&] {
        r.model->ZeroGradients();
        (void)r.model->Step(tokens.data(), b, t, o).value();
        r.optimizer->Step(r.model->params(), r.model->grads(), 10, 1000);
        r.backend->Synchronize();
      },
      1, 3);
}

struct Args {
  int reps = 3, threads = 2;
  std::string dir =
      (fs::current_path() / ("checkpoint_bench." + std::to_string(getpid()))).string();
};

// The exit code when the command line says to stop: after --help, or bad usage.
std::optional<int> ParseArgs(int argc, char** argv, Args* a) {
  CommandLine cl("checkpoint_bench",
                 "Sharded checkpoints of the README demo's model: save, the step's stall and "
                 "load, each against a baseline; prints one JSON line.");
  cl.AddString("--dir", &a->dir, "DIR", "where the checkpoints are written (removed after)");
  cl.AddInt("--reps", &a->reps, "timed rounds, after one that warms up", 1);
  cl.AddInt("--threads", &a->threads, "the backend's threads (0: every core)", 0);
  return cl.Parse(argc, argv);
}

// The one-rank rounds, after a warm-up round: each save with its dd baseline, the step's
// stall with its memcpy baseline, and the load of what was saved.
struct SaveRounds {
  std::vector<double> save, dd, stall, memcpy_s, load;
  uint64_t bytes = 0;  // of one checkpoint
  std::string last;    // the newest checkpoint
};

// Saves and loads `r`'s state (of `state_floats` floats: parameters and both moments) under
// `dir`/one, `reps` rounds after one that warms up.
SaveRounds MeasureSaves(Rank& r, const std::string& dir, size_t state_floats, int reps) {
  SaveRounds out;
  std::vector<float> copy(state_floats, 1.0f);   // touched: the memcpy baseline pays no faults
  for (int round = 0; round <= reps; ++round) {  // round 0 warms up
    const int64_t step = 100 + round;
    const double d = DdSeconds(dir, out.bytes > 0 ? out.bytes : state_floats * sizeof(float));
    const double s = Seconds([&] {
      if (!r.checkpointer->Save(StateAt(step, 1, false), nullptr).ok() ||
          !r.checkpointer->Poll(true, nullptr).ok()) {
        std::fprintf(stderr, "checkpoint_bench: save failed\n");
        std::exit(1);
      }
    });
    const std::string path = dir + "/one/step-" + std::to_string(step);
    out.last = path;
    out.bytes = DirBytes(path);
    const float* p = r.model->params().f32();
    const size_t n = state_floats / 3;
    const double m = Seconds([&] {
      std::memcpy(copy.data(), p, n * sizeof(float));
      std::memcpy(copy.data() + n, r.optimizer->m().f32(), n * sizeof(float));
      std::memcpy(copy.data() + 2 * n, r.optimizer->v().f32(), n * sizeof(float));
    });
    const double l = Seconds([&] { (void)r.checkpointer->Restore(path).value(); });
    if (round == 0) continue;
    out.save.push_back(s);
    out.dd.push_back(d);
    out.stall.push_back(r.checkpointer->last_stall_seconds());
    out.memcpy_s.push_back(m);
    out.load.push_back(l);
  }
  return out;
}

// Reshard: the same model saved at step 1 by a DP2 + ZeRO-1 group (threads) under `dir`/z,
// then loaded at `r`'s one rank, against loading `same_layout`, `reps` rounds after one that
// warms up. The reshard and same-layout seconds of each round.
std::pair<std::vector<double>, std::vector<double>> MeasureReshard(const Config& config, Rank& r,
                                                                   const std::string& dir,
                                                                   const std::string& same_layout,
                                                                   int reps) {
  std::vector<std::unique_ptr<comm::Communicator>> two =
      comm::InProcessCommunicator::CreateGroup(2);
  std::vector<std::thread> ranks;
  for (int i = 0; i < 2; ++i) {
    ranks.emplace_back([&, i] {
      Rank z = MakeRank(config, two[i].get(), 2, true, dir + "/z", 1);
      if (!z.checkpointer->Save(StateAt(1, 2, true), nullptr).ok() ||
          !z.checkpointer->Poll(true, nullptr).ok()) {
        std::fprintf(stderr, "checkpoint_bench: DP2 save failed\n");
      }
    });
  }
  for (auto& t : ranks) t.join();
  std::vector<double> reshard, same;
  for (int round = 0; round <= reps; ++round) {
    const double a = Seconds([&] { (void)r.checkpointer->Restore(dir + "/z/step-1").value(); });
    const double b = Seconds([&] { (void)r.checkpointer->Restore(same_layout).value(); });
    if (round == 0) continue;
    reshard.push_back(a);
    same.push_back(b);
  }
  return {reshard, same};
}

// The JSON line: medians, and each figure against its baseline as the median over rounds.
void PrintResults(const Args& a, const SaveRounds& s, double step_s,
                  const std::vector<double>& reshard, const std::vector<double>& same) {
  const double mb = static_cast<double>(s.bytes) / 1e6;
  const RoundRatio save_vs_dd = RoundRatios(s.dd, s.save);  // throughput ratio = time⁻¹ ratio
  const RoundRatio stall_vs_copy = RoundRatios(s.stall, s.memcpy_s);
  const RoundRatio reshard_vs_same = RoundRatios(reshard, same);
  std::printf(
      "{\"bench\": \"checkpoint\", \"state_mb\": %.1f, \"threads\": %d, \"reps\": %d, "
      "\"save_mb_s\": %.1f, \"dd_fdatasync_mb_s\": %.1f, \"save_vs_dd\": %.3f, "
      "\"save_vs_dd_min\": %.3f, \"save_vs_dd_max\": %.3f, "
      "\"stall_s\": %.4f, \"memcpy_s\": %.4f, \"stall_vs_memcpy\": %.3f, "
      "\"step_s\": %.3f, \"stall_of_step\": %.4f, "
      "\"load_mb_s\": %.1f, \"reshard_load_s\": %.3f, \"same_layout_load_s\": %.3f, "
      "\"reshard_vs_same\": %.3f}\n",
      mb, a.threads, a.reps, mb / Median(s.save), mb / Median(s.dd), save_vs_dd.median,
      save_vs_dd.min, save_vs_dd.max, Median(s.stall), Median(s.memcpy_s), stall_vs_copy.median,
      step_s, Median(s.stall) / step_s, mb / Median(s.load), Median(reshard), Median(same),
      reshard_vs_same.median);
}

int Main(int argc, char** argv) {
  Args args;
  if (const std::optional<int> exit = ParseArgs(argc, argv, &args)) return *exit;
  const std::string& dir = args.dir;
  fs::create_directories(dir);
  std::vector<std::unique_ptr<comm::Communicator>> one =
      comm::InProcessCommunicator::CreateGroup(1);
  const Config config = DemoConfig();
  Rank r = MakeRank(config, one[0].get(), 1, false, dir + "/one", args.threads);
  const size_t state_floats = static_cast<size_t>(r.model->table().total_numel()) * 3;
  const SaveRounds saves = MeasureSaves(r, dir, state_floats, args.reps);
  const double step_s = StepSeconds(config, r);
  const auto [reshard, same] = MeasureReshard(config, r, dir, saves.last, args.reps);
  fs::remove_all(dir);
  PrintResults(args, saves, step_s, reshard, same);
  return 0;
}

}  // namespace
}  // namespace fullband::bench

int main(int argc, char** argv) { return fullband::bench::Main(argc, argv); }
