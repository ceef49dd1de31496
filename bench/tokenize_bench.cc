// Single-thread encode throughput of the Phi-4 tokenizer on the given text files: one JSON line
// per file with MB/s (10^6 bytes of input per second) and tokens/s, medians of --reps runs
// (wall clock; cpu_mb_per_s from the thread's CPU time), after one line with the median time of
// Tokenizer::Load.
// bench/run_tokenize_bench.py runs it next to tiktoken's WASM build on the same files.
// `tokenize_bench --help` lists the flags.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_cli.h"
#include "bench/bench_util.h"
#include "cli/options.h"
#include "common/check.h"
#include "dataloader/tokenizer.h"

namespace fullband {
namespace {

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Args {
  int64_t reps = 5;
  std::string ranks;
  std::vector<std::string> files;
};

// The exit code when the command line says to stop: after --help, or bad usage.
std::optional<int> ParseArgs(int argc, char** argv, Args* a) {
  bench::CommandLine cl("tokenize_bench",
                        "Single-thread encode throughput of the Phi-4 tokenizer on text files; "
                        "prints JSON lines.");
  cl.AddInt("--reps", &a->reps, "timed runs of the load and of each file (the median counts)", 1);
  cli::AddTokenizerOption(cl.app(), &a->ranks);
  cl.app()
      .add_option("FILE", a->files, "text files to encode")
      ->required()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  return cl.Parse(argc, argv);
}

int Run(int argc, char** argv) {
  Args args;
  if (const std::optional<int> exit = ParseArgs(argc, argv, &args)) return *exit;
  const std::string& ranks = args.ranks;
  StatusOr<dataloader::Tokenizer> tokenizer = dataloader::Tokenizer::Load(ranks);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "tokenize_bench: %s\n", tokenizer.status().message().c_str());
    return 2;
  }
  // What every `fullband tokenize` and `fullband ingest` pays before its first id: reading,
  // hashing and checking the ranks file and building the tables (the file is in the page cache).
  const double load_seconds =
      bench::MedianSeconds([&] { FB_CHECK(dataloader::Tokenizer::Load(ranks).ok()); }, /*warmup=*/0,
                           static_cast<int>(args.reps));
  std::printf(
      "{\"bench\": \"tokenizer_load\", \"impl\": \"fullband\", \"seconds\": %.4f, "
      "\"reps\": %ld, \"cpu\": \"%s\"}\n",
      load_seconds, static_cast<long>(args.reps), bench::CpuModel().c_str());
  for (const std::string& path : args.files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "tokenize_bench: %s: cannot open\n", path.c_str());
      return 2;
    }
    std::stringstream buffer;
    buffer << in.rdbuf();
    const std::string text = std::move(buffer).str();
    std::vector<uint32_t> ids;
    std::vector<double> cpu;  // thread CPU seconds of each run: steadier on a busy machine
    const double seconds = bench::MedianSeconds(
        [&] {
          const double c0 = ThreadCpuSeconds();
          ids.clear();
          tokenizer->Encode(text, false, &ids);
          cpu.push_back(ThreadCpuSeconds() - c0);
        },
        /*warmup=*/1, static_cast<int>(args.reps));
    std::sort(cpu.begin() + 1, cpu.end());  // cpu[0] is the warm-up
    const double cpu_seconds = cpu[1 + (cpu.size() - 1) / 2];
    std::printf(
        "{\"bench\": \"tokenize\", \"impl\": \"fullband\", \"file\": \"%s\", \"bytes\": %zu, "
        "\"tokens\": %zu, \"seconds\": %.4f, \"mb_per_s\": %.2f, \"tokens_per_s\": %.0f, "
        "\"cpu_mb_per_s\": %.2f, \"reps\": %ld, \"threads\": 1, \"cpu\": \"%s\"}\n",
        path.c_str(), text.size(), ids.size(), seconds, text.size() / seconds / 1e6,
        ids.size() / seconds, text.size() / cpu_seconds / 1e6, static_cast<long>(args.reps),
        bench::CpuModel().c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace fullband

int main(int argc, char** argv) { return fullband::Run(argc, argv); }
