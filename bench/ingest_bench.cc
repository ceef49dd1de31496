// ingest_bench: `fullband ingest` throughput on every core against single-thread encoding of
// the same documents, both measured in this run.
// `ingest_bench --help` lists the flags. --tokenizer (or FULLBAND_TOKENIZER_RANKS) names the
// ranks file, as for `fullband ingest`.
//
// The baseline tokenizes every document of the input on one thread (Tokenizer::Encode, plus
// <|endoftext|>), nothing else. The ingest run does all of it: reading, JSON parsing,
// tokenizing on N threads, packing and writing the RocksDB store (into a fresh temporary
// directory each repeat). A third measurement bounds what N threads can give: the documents
// dealt to N threads that only encode, with no reading, parsing or writing. The three run
// interleaved, R rounds, so that a slow phase of the machine hits all of them. Reported: the
// median time of each, and the ratios as the median over rounds of each round's ratio (a
// phase that slows a whole round cancels out), with their smallest and largest. --copies K
// ingests the input K times over (one file), for a long ingest from a small corpus. Prints one
// JSON line per measurement and the ratios.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "bench/bench_cli.h"
#include "bench/bench_util.h"
#include "cli/options.h"
#include "dataloader/ingest.h"
#include "dataloader/tokenizer.h"

namespace fullband {
namespace {

struct Args {
  std::string input, ranks;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int reps = 3, copies = 1;
};

// The exit code when the command line says to stop: after --help, or bad usage.
std::optional<int> ParseArgs(int argc, char** argv, Args* a) {
  bench::CommandLine cl("ingest_bench",
                        "`fullband ingest` on every core against encoding the same documents on "
                        "one thread; prints JSON lines.");
  cl.AddString("--input", &a->input, "FILE.jsonl|FILE.txt",
               "the corpus: JSONL when its name ends in .jsonl, else text")
      ->required();
  cl.AddInt("--threads", &a->threads, "ingest's threads, and the encode-only bound's", 1)
      ->default_str("every core");
  cl.AddInt("--reps", &a->reps, "rounds of the three measurements", 1);
  cl.AddInt("--copies", &a->copies, "ingest the input this many times over, as one file", 1)
      ->type_name("K");
  cli::AddTokenizerOption(cl.app(), &a->ranks);
  return cl.Parse(argc, argv);
}

int Run(int argc, char** argv) {
  Args args;
  if (const std::optional<int> exit = ParseArgs(argc, argv, &args)) return *exit;
  const std::string& input = args.input;
  const int threads = args.threads, reps = args.reps, copies = args.copies;
  StatusOr<dataloader::Tokenizer> tok = dataloader::Tokenizer::Load(args.ranks);
  if (!tok.ok()) {
    std::fprintf(stderr, "ingest_bench: %s\n", tok.status().ToString().c_str());
    return 1;
  }

  // The documents, as ingest sees them.
  std::vector<std::string> docs;
  uint64_t bytes = 0;
  {
    std::ifstream in(input, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "ingest_bench: cannot read %s\n", input.c_str());
      return 1;
    }
    const bool jsonl = input.size() > 6 && input.substr(input.size() - 6) == ".jsonl";
    if (jsonl) {
      std::string line;
      while (std::getline(in, line)) {
        bytes += line.size() + 1;
        if (line.empty()) continue;
        docs.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
      }
    } else {
      docs.emplace_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      bytes = docs.back().size();
    }
  }

  // --copies: the input K times over, in one file.
  const std::string dir = "/tmp/fullband_ingest_bench_" + std::to_string(getpid());
  std::string source = input;
  if (copies > 1) {
    std::filesystem::create_directories(dir + "_in");
    source = dir + "_in/" + std::filesystem::path(input).filename().string();
    std::ifstream in(input, std::ios::binary);
    const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(source, std::ios::binary);
    for (int k = 0; k < copies; ++k) out << all;
    const std::vector<std::string> one = docs;
    for (int k = 1; k < copies; ++k) docs.insert(docs.end(), one.begin(), one.end());
    bytes *= static_cast<uint64_t>(copies);
  }

  int64_t tokens = 0, ingested = 0;
  auto encode_one_thread = [&] {
    std::vector<uint32_t> ids;
    tokens = 0;
    for (const std::string& d : docs) {
      ids.clear();
      tok->Encode(d, false, &ids);
      tokens += static_cast<int64_t>(ids.size()) + 1;
    }
  };
  auto encode_threads = [&] {  // document i to thread i mod N
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        std::vector<uint32_t> ids;
        for (size_t i = static_cast<size_t>(t); i < docs.size();
             i += static_cast<size_t>(threads)) {
          ids.clear();
          tok->Encode(docs[i], false, &ids);
        }
      });
    }
    for (std::thread& th : pool) th.join();
  };
  auto ingest = [&] {  // into a new store: the last one is removed before the clock starts
    dataloader::IngestOptions o;
    o.inputs = {source};
    o.out = dir;
    o.seq_len = 2048;
    o.threads = threads;
    StatusOr<dataloader::IngestResult> r = dataloader::Ingest(*tok, o, nullptr);
    if (!r.ok()) {
      std::fprintf(stderr, "ingest_bench: %s\n", r.status().ToString().c_str());
      std::exit(1);
    }
    ingested = r->totals.tokens;
  };
  encode_one_thread();  // warm up
  encode_threads();
  // Wall and CPU seconds of each phase: CPU over wall tells cores left idle from work that
  // grew when it ran beside other threads.
  std::vector<double> t_one, t_threads, t_ingest, cpu_threads, cpu_ingest;
  auto timed = [](const std::function<void()>& fn, std::vector<double>* wall,
                  std::vector<double>* cpu) {
    const double c0 = bench::ProcessCpuSeconds();
    wall->push_back(bench::Seconds(fn));
    cpu->push_back(bench::ProcessCpuSeconds() - c0);
  };
  for (int r = 0; r < reps; ++r) {
    t_one.push_back(bench::Seconds(encode_one_thread));
    std::filesystem::remove_all(dir);
    timed(ingest, &t_ingest, &cpu_ingest);
    timed(encode_threads, &t_threads, &cpu_threads);
  }
  const double t_encode = bench::Median(t_one), t_bound = bench::Median(t_threads),
               t_all = bench::Median(t_ingest);
  const bench::RoundRatio ingest_ratio = bench::RoundRatios(t_one, t_ingest);
  const bench::RoundRatio bound_ratio = bench::RoundRatios(t_one, t_threads);
  std::filesystem::remove_all(dir);
  if (copies > 1) std::filesystem::remove_all(dir + "_in");
  if (ingested != tokens) {
    std::fprintf(stderr, "ingest_bench: ingest counted %ld tokens, encoding %ld\n", ingested,
                 tokens);
    return 1;
  }
  const double mb = static_cast<double>(bytes) / 1e6;
  std::printf(
      "{\"bench\": \"ingest\", \"impl\": \"encode_1_thread\", \"input\": \"%s\", \"copies\": %d, "
      "\"mb\": %.2f, \"documents\": %zu, \"tokens\": %ld, \"mb_per_s\": %.2f, "
      "\"seconds_median\": %.3f}\n",
      input.c_str(), copies, mb, docs.size(), tokens, mb / t_encode, t_encode);
  std::printf(
      "{\"bench\": \"ingest\", \"impl\": \"encode_only\", \"threads\": %d, \"mb_per_s\": %.2f, "
      "\"seconds_median\": %.3f, \"cpu_seconds_median\": %.3f}\n",
      threads, mb / t_bound, t_bound, bench::Median(cpu_threads));
  std::printf(
      "{\"bench\": \"ingest\", \"impl\": \"ingest\", \"threads\": %d, \"mb_per_s\": %.2f, "
      "\"seconds_median\": %.3f, \"cpu_seconds_median\": %.3f}\n",
      threads, mb / t_all, t_all, bench::Median(cpu_ingest));
  std::printf(
      "{\"bench\": \"ingest\", \"summary\": true, \"rounds\": %d, \"ingest_over_encode\": %.3f, "
      "\"ingest_over_encode_min\": %.3f, \"ingest_over_encode_max\": %.3f, "
      "\"encode_only_over_encode\": %.3f, \"cpu\": \"%s\", \"cores\": %u}\n",
      reps, ingest_ratio.median, ingest_ratio.min, ingest_ratio.max, bound_ratio.median,
      bench::CpuModel().c_str(), std::thread::hardware_concurrency());
  return 0;
}

}  // namespace
}  // namespace fullband

int main(int argc, char** argv) { return fullband::Run(argc, argv); }
