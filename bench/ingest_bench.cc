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

// The documents of the input as ingest sees them: a JSONL file's "text" fields, or a text
// file as one document; and the input's size in bytes.
struct Corpus {
  std::vector<std::string> docs;
  uint64_t bytes = 0;
};

// nullopt, with a line on stderr, when `input` cannot be read.
std::optional<Corpus> ReadCorpus(const std::string& input) {
  std::ifstream in(input, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "ingest_bench: cannot read %s\n", input.c_str());
    return std::nullopt;
  }
  Corpus c;
  const bool jsonl = input.size() > 6 && input.substr(input.size() - 6) == ".jsonl";
  if (jsonl) {
    std::string line;
    while (std::getline(in, line)) {
      c.bytes += line.size() + 1;
      if (line.empty()) continue;
      c.docs.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
    }
  } else {
    c.docs.emplace_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    c.bytes = c.docs.back().size();
  }
  return c;
}

// --copies: writes `input` `copies` times over into one file in `dir` (same name) and repeats
// the corpus to match; returns that file's path.
std::string WriteCopies(const std::string& input, int copies, const std::string& dir,
                        Corpus* corpus) {
  std::filesystem::create_directories(dir);
  const std::string source = dir + "/" + std::filesystem::path(input).filename().string();
  std::ifstream in(input, std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream out(source, std::ios::binary);
  for (int k = 0; k < copies; ++k) out << all;
  const std::vector<std::string> one = corpus->docs;
  for (int k = 1; k < copies; ++k) corpus->docs.insert(corpus->docs.end(), one.begin(), one.end());
  corpus->bytes *= static_cast<uint64_t>(copies);
  return source;
}

// The baseline: every document encoded on one thread, plus <|endoftext|>; returns the tokens.
int64_t EncodeOneThread(const dataloader::Tokenizer& tok, const std::vector<std::string>& docs) {
  std::vector<uint32_t> ids;
  int64_t tokens = 0;
  for (const std::string& d : docs) {
    ids.clear();
    tok.Encode(d, false, &ids);
    tokens += static_cast<int64_t>(ids.size()) + 1;
  }
  return tokens;
}

// The bound: document i encoded by thread i mod `threads`, nothing else.
void EncodeOnThreads(const dataloader::Tokenizer& tok, const std::vector<std::string>& docs,
                     int threads) {
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<uint32_t> ids;
      for (size_t i = static_cast<size_t>(t); i < docs.size(); i += static_cast<size_t>(threads)) {
        ids.clear();
        tok.Encode(docs[i], false, &ids);
      }
    });
  }
  for (std::thread& th : pool) th.join();
}

// `fullband ingest` of `source` into a new store `out` (which must not exist) on `threads`
// threads; returns the tokens it stored. Exits 1 when ingest fails.
int64_t IngestOnce(const dataloader::Tokenizer& tok, const std::string& source,
                   const std::string& out, int threads) {
  dataloader::IngestOptions o;
  o.inputs = {source};
  o.out = out;
  o.seq_len = 2048;
  o.threads = threads;
  StatusOr<dataloader::IngestResult> r = dataloader::Ingest(tok, o, nullptr);
  if (!r.ok()) {
    std::fprintf(stderr, "ingest_bench: %s\n", r.status().ToString().c_str());
    std::exit(1);
  }
  return r->totals.tokens;
}

// Wall and CPU seconds of each measurement, a round each: CPU over wall tells cores left idle
// from work that grew when it ran beside other threads. And the tokens each way counted.
struct Rounds {
  std::vector<double> t_one, t_threads, t_ingest, cpu_threads, cpu_ingest;
  int64_t tokens = 0, ingested = 0;
};

void Timed(const std::function<void()>& fn, std::vector<double>* wall, std::vector<double>* cpu) {
  const double c0 = bench::ProcessCpuSeconds();
  wall->push_back(bench::Seconds(fn));
  cpu->push_back(bench::ProcessCpuSeconds() - c0);
}

// The three measurements interleaved, `reps` rounds after one unmeasured run of each encoding;
// each ingest writes a new store at `dir`, the last one removed before its clock starts.
Rounds Measure(const dataloader::Tokenizer& tok, const Corpus& corpus, const std::string& source,
               const std::string& dir, int threads, int reps) {
  Rounds r;
  const auto encode_one_thread = [&] { r.tokens = EncodeOneThread(tok, corpus.docs); };
  const auto encode_threads = [&] { EncodeOnThreads(tok, corpus.docs, threads); };
  const auto ingest = [&] { r.ingested = IngestOnce(tok, source, dir, threads); };
  encode_one_thread();  // warm up
  encode_threads();
  for (int i = 0; i < reps; ++i) {
    r.t_one.push_back(bench::Seconds(encode_one_thread));
    std::filesystem::remove_all(dir);
    Timed(ingest, &r.t_ingest, &r.cpu_ingest);
    Timed(encode_threads, &r.t_threads, &r.cpu_threads);
  }
  return r;
}

// One JSON line per measurement (medians), then the ratios.
void PrintResults(const Args& a, const Corpus& corpus, const Rounds& r) {
  const double t_encode = bench::Median(r.t_one), t_bound = bench::Median(r.t_threads),
               t_all = bench::Median(r.t_ingest);
  const bench::RoundRatio ingest_ratio = bench::RoundRatios(r.t_one, r.t_ingest);
  const bench::RoundRatio bound_ratio = bench::RoundRatios(r.t_one, r.t_threads);
  const double mb = static_cast<double>(corpus.bytes) / 1e6;
  std::printf(
      "{\"bench\": \"ingest\", \"impl\": \"encode_1_thread\", \"input\": \"%s\", \"copies\": %d, "
      "\"mb\": %.2f, \"documents\": %zu, \"tokens\": %ld, \"mb_per_s\": %.2f, "
      "\"seconds_median\": %.3f}\n",
      a.input.c_str(), a.copies, mb, corpus.docs.size(), r.tokens, mb / t_encode, t_encode);
  std::printf(
      "{\"bench\": \"ingest\", \"impl\": \"encode_only\", \"threads\": %d, \"mb_per_s\": %.2f, "
      "\"seconds_median\": %.3f, \"cpu_seconds_median\": %.3f}\n",
      a.threads, mb / t_bound, t_bound, bench::Median(r.cpu_threads));
  std::printf(
      "{\"bench\": \"ingest\", \"impl\": \"ingest\", \"threads\": %d, \"mb_per_s\": %.2f, "
      "\"seconds_median\": %.3f, \"cpu_seconds_median\": %.3f}\n",
      a.threads, mb / t_all, t_all, bench::Median(r.cpu_ingest));
  std::printf(
      "{\"bench\": \"ingest\", \"summary\": true, \"rounds\": %d, \"ingest_over_encode\": %.3f, "
      "\"ingest_over_encode_min\": %.3f, \"ingest_over_encode_max\": %.3f, "
      "\"encode_only_over_encode\": %.3f, \"cpu\": \"%s\", \"cores\": %u}\n",
      a.reps, ingest_ratio.median, ingest_ratio.min, ingest_ratio.max, bound_ratio.median,
      bench::CpuModel().c_str(), std::thread::hardware_concurrency());
}

int Run(int argc, char** argv) {
  Args args;
  if (const std::optional<int> exit = ParseArgs(argc, argv, &args)) return *exit;
  StatusOr<dataloader::Tokenizer> tok = dataloader::Tokenizer::Load(args.ranks);
  if (!tok.ok()) {
    std::fprintf(stderr, "ingest_bench: %s\n", tok.status().ToString().c_str());
    return 1;
  }
  std::optional<Corpus> corpus = ReadCorpus(args.input);
  if (!corpus) return 1;
  const std::string dir = "/tmp/fullband_ingest_bench_" + std::to_string(getpid());
  const std::string source =
      args.copies > 1 ? WriteCopies(args.input, args.copies, dir + "_in", &*corpus) : args.input;
  const Rounds rounds = Measure(*tok, *corpus, source, dir, args.threads, args.reps);
  std::filesystem::remove_all(dir);
  if (args.copies > 1) std::filesystem::remove_all(dir + "_in");
  if (rounds.ingested != rounds.tokens) {
    std::fprintf(stderr, "ingest_bench: ingest counted %ld tokens, encoding %ld\n", rounds.ingested,
                 rounds.tokens);
    return 1;
  }
  PrintResults(args, *corpus, rounds);
  return 0;
}

}  // namespace
}  // namespace fullband

int main(int argc, char** argv) { return fullband::Run(argc, argv); }
