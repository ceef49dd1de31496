// Single-thread encode throughput of the Phi-4 tokenizer on the given text files: one JSON line
// per file with MB/s (10^6 bytes of input per second) and tokens/s, medians of --reps runs
// (wall clock; cpu_mb_per_s from the thread's CPU time), after one line with the median time of
// Tokenizer::Load.
// bench/run_tokenize_bench.py runs it next to tiktoken's WASM build on the same files.
//
//   tokenize_bench [--reps N] [--tokenizer RANKS] FILE...
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "cli/flags.h"
#include "common/check.h"
#include "dataloader/tokenizer.h"

namespace fullband {
namespace {

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int Run(const std::vector<std::string>& args) {
  StatusOr<cli::Flags> flags = cli::Flags::Parse(args, {"reps", "tokenizer"}, {});
  StatusOr<int64_t> reps = flags.ok() ? flags->GetInt("reps", 5) : flags.status();
  if (!reps.ok() || flags->positional().empty() || *reps < 1) {
    std::fprintf(stderr, "usage: tokenize_bench [--reps N] [--tokenizer RANKS] FILE...\n%s\n",
                 reps.ok() ? "" : reps.status().message().c_str());
    return 2;
  }
  const std::string ranks = flags->Get("tokenizer", dataloader::Tokenizer::DefaultRanksPath());
  StatusOr<dataloader::Tokenizer> tokenizer = dataloader::Tokenizer::Load(ranks);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "tokenize_bench: %s\n", tokenizer.status().message().c_str());
    return 2;
  }
  // What every `fullband tokenize` and `fullband ingest` pays before its first id: reading,
  // hashing and checking the ranks file and building the tables (the file is in the page cache).
  const double load_seconds =
      bench::MedianSeconds([&] { FB_CHECK(dataloader::Tokenizer::Load(ranks).ok()); }, /*warmup=*/0,
                           static_cast<int>(*reps));
  std::printf(
      "{\"bench\": \"tokenizer_load\", \"impl\": \"fullband\", \"seconds\": %.4f, "
      "\"reps\": %ld, \"cpu\": \"%s\"}\n",
      load_seconds, static_cast<long>(*reps), bench::CpuModel().c_str());
  for (const std::string& path : flags->positional()) {
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
        /*warmup=*/1, static_cast<int>(*reps));
    std::sort(cpu.begin() + 1, cpu.end());  // cpu[0] is the warm-up
    const double cpu_seconds = cpu[1 + (cpu.size() - 1) / 2];
    std::printf(
        "{\"bench\": \"tokenize\", \"impl\": \"fullband\", \"file\": \"%s\", \"bytes\": %zu, "
        "\"tokens\": %zu, \"seconds\": %.4f, \"mb_per_s\": %.2f, \"tokens_per_s\": %.0f, "
        "\"cpu_mb_per_s\": %.2f, \"reps\": %ld, \"threads\": 1, \"cpu\": \"%s\"}\n",
        path.c_str(), text.size(), ids.size(), seconds, text.size() / seconds / 1e6,
        ids.size() / seconds, text.size() / cpu_seconds / 1e6, static_cast<long>(*reps),
        bench::CpuModel().c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace fullband

int main(int argc, char** argv) {
  return fullband::Run(std::vector<std::string>(argv + 1, argv + argc));
}
