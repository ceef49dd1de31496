// ingest_bench: `fullband ingest` throughput on every core against single-thread encoding of
// the same documents, both measured in this run.
//
//   ingest_bench --input FILE.jsonl|FILE.txt [--threads N] [--reps R]
//
// The baseline tokenizes every document of the input on one thread (Tokenizer::Encode, plus
// <|endoftext|>), nothing else. The ingest run does all of it: reading, JSON parsing,
// tokenizing on N threads, packing and writing the RocksDB store (into a fresh temporary
// directory each repeat). Prints one JSON line per measurement and the ratio.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/bench_util.h"
#include "cli/flags.h"
#include "dataloader/ingest.h"
#include "dataloader/tokenizer.h"

namespace fullband {
namespace {

int Run(const std::vector<std::string>& args) {
  StatusOr<cli::Flags> flags = cli::Flags::Parse(args, {"input", "threads", "reps"}, {});
  if (!flags.ok() || !flags->Has("input")) {
    std::fprintf(stderr, "usage: ingest_bench --input FILE [--threads N] [--reps R]\n");
    return 2;
  }
  const std::string input = flags->Get("input", "");
  const int threads = static_cast<int>(
      flags->GetInt("threads", std::max(1u, std::thread::hardware_concurrency())).value());
  const int reps = static_cast<int>(flags->GetInt("reps", 3).value());
  StatusOr<dataloader::Tokenizer> tok =
      dataloader::Tokenizer::Load(dataloader::Tokenizer::DefaultRanksPath());
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

  int64_t tokens = 0;
  const double t_encode = bench::MedianSeconds(
      [&] {
        std::vector<uint32_t> ids;
        tokens = 0;
        for (const std::string& d : docs) {
          ids.clear();
          tok->Encode(d, false, &ids);
          tokens += static_cast<int64_t>(ids.size()) + 1;
        }
      },
      1, reps);

  const std::string dir = "/tmp/fullband_ingest_bench_" + std::to_string(getpid());
  int64_t ingested = 0;
  const double t_ingest = bench::MedianSeconds(
      [&] {
        std::filesystem::remove_all(dir);
        dataloader::IngestOptions o;
        o.inputs = {input};
        o.out = dir;
        o.seq_len = 2048;
        o.threads = threads;
        StatusOr<dataloader::IngestResult> r = dataloader::Ingest(*tok, o, nullptr);
        if (!r.ok()) {
          std::fprintf(stderr, "ingest_bench: %s\n", r.status().ToString().c_str());
          std::exit(1);
        }
        ingested = r->totals.tokens;
      },
      0, reps);
  std::filesystem::remove_all(dir);
  if (ingested != tokens) {
    std::fprintf(stderr, "ingest_bench: ingest counted %ld tokens, encoding %ld\n", ingested,
                 tokens);
    return 1;
  }
  const double mb = static_cast<double>(bytes) / 1e6;
  std::printf(
      "{\"bench\": \"ingest\", \"impl\": \"encode_1_thread\", \"input\": \"%s\", \"mb\": %.2f, "
      "\"documents\": %zu, \"tokens\": %ld, \"mb_per_s\": %.2f, \"seconds_median\": %.3f}\n",
      input.c_str(), mb, docs.size(), tokens, mb / t_encode, t_encode);
  std::printf(
      "{\"bench\": \"ingest\", \"impl\": \"ingest\", \"threads\": %d, \"mb_per_s\": %.2f, "
      "\"seconds_median\": %.3f}\n",
      threads, mb / t_ingest, t_ingest);
  std::printf(
      "{\"bench\": \"ingest\", \"summary\": true, \"ingest_over_encode\": %.3f, "
      "\"cpu\": \"%s\", \"cores\": %u}\n",
      t_encode / t_ingest, bench::CpuModel().c_str(), std::thread::hardware_concurrency());
  return 0;
}

}  // namespace
}  // namespace fullband

int main(int argc, char** argv) {
  return fullband::Run(std::vector<std::string>(argv + 1, argv + argc));
}
