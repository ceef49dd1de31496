// reader_bench: training batches per second from a RocksDB token store through the prefetching
// BatchReader, against the baseline of copying the same sequences, in the same random order,
// out of a memory-mapped flat file — both measured in this run, both from the page cache.
// `reader_bench --help` lists the flags.
//
// The two alternate, an epoch each per round, --reps rounds. Prints one JSON line per
// measurement (median epoch) and a summary line with the ratio: the median over rounds of each
// round's ratio, with its extremes.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "bench/bench_cli.h"
#include "bench/bench_util.h"
#include "cli/options.h"
#include "common/random.h"
#include "dataloader/reader.h"
#include "dataloader/token_store.h"

namespace fullband {
namespace {

using dataloader::Sampler;

struct Args {
  int64_t sequences = 40000, seq_len = 512, batch = 32, prefetch = 8;
  int reps = 15, threads = 1;
  std::string dir = "/tmp/fullband_reader_bench";
};

// The exit code when the command line says to stop: after --help, or bad usage.
std::optional<int> ParseArgs(int argc, char** argv, Args* a) {
  bench::CommandLine cl("reader_bench",
                        "Batches out of a token store through BatchReader, against copies out of a "
                        "memory-mapped file; prints JSON lines.");
  cl.AddInt("--sequences", &a->sequences, "sequences in the store and the file", 1);
  cl.AddInt("--seq-len", &a->seq_len, "tokens per sequence, less one", 1);
  cl.AddInt("--batch", &a->batch, "sequences per batch", 1);
  cl.AddInt("--prefetch", &a->prefetch, "batches the reader keeps ready (0: it reads in Next)", 0);
  cl.AddInt("--threads", &a->threads, "the reader's threads", 1);
  cl.AddInt("--reps", &a->reps, "rounds, each an epoch of both", 1);
  cl.AddString("--dir", &a->dir, "DIR", "where the store and the file are written (removed after)");
  return cl.Parse(argc, argv);
}

int Run(int argc, char** argv) {
  Args args;
  if (const std::optional<int> exit = ParseArgs(argc, argv, &args)) return *exit;
  const int64_t n = args.sequences, s = args.seq_len, batch = args.batch, prefetch = args.prefetch;
  const int reps = args.reps, threads = args.threads;
  const std::string& dir = args.dir;
  const int64_t len = s + 1;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);

  // The same random ids into a flat file and a store.
  std::vector<uint32_t> ids(static_cast<size_t>(n * len));
  Rng rng(1);
  for (uint32_t& id : ids) id = static_cast<uint32_t>(rng.Below(100352));
  const std::string flat = dir + "/tokens.bin";
  std::ofstream(flat, std::ios::binary)
      .write(reinterpret_cast<const char*>(ids.data()),
             static_cast<std::streamsize>(ids.size() * 4));
  const std::string path = dir + "/store";
  {
    auto w = dataloader::TokenStoreWriter::Open(path, {"bench", "-", 100352, s}, "{}");
    if (!w.ok()) {
      std::fprintf(stderr, "reader_bench: %s\n", w.status().ToString().c_str());
      return 1;
    }
    const int64_t step = 4096;
    for (int64_t at = 0; at < n; at += step) {
      const int64_t k = std::min(step, n - at);
      if (!(*w)->Append({ids.data() + at * len, static_cast<size_t>(k * len)}).ok()) return 1;
    }
    dataloader::StoreSource src{"random", ids.size() * 4, "0", 1, static_cast<int64_t>(ids.size()),
                                0};
    if (!(*w)->Commit({}, {src}).ok() || !(*w)->Close().ok()) return 1;
  }
  auto store = dataloader::RocksDbTokenStore::Open(path);
  if (!store.ok()) {
    std::fprintf(stderr, "reader_bench: %s\n", store.status().ToString().c_str());
    return 1;
  }

  const int fd = ::open(flat.c_str(), O_RDONLY);
  const size_t bytes = ids.size() * 4;
  const auto* mapped =
      static_cast<const uint32_t*>(mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0));
  ids.clear();
  ids.shrink_to_fit();

  const int64_t steps = n / batch;  // one epoch
  const Sampler sampler = Sampler::Create({n}, {1.0}, 7).value();
  std::vector<int32_t> out(static_cast<size_t>(batch * len));
  uint64_t checksum = 0;

  // Baseline: the sampler's order, each sequence copied out of the mapping.
  auto mmap_epoch = [&] {
    dataloader::SamplerCursor c = sampler.Start();
    std::vector<Sampler::Draw> draws;
    for (int64_t i = 0; i < steps; ++i) {
      sampler.NextBatch(0, 1, batch, &c, &draws);
      for (int64_t r = 0; r < batch; ++r) {
        const uint32_t* from = mapped + draws[r].index * len;
        for (int64_t t = 0; t < len; ++t) out[r * len + t] = static_cast<int32_t>(from[t]);
      }
      checksum += static_cast<uint32_t>(out[0]);
    }
  };
  auto store_epoch = [&] {
    dataloader::ReaderOptions o;
    o.batch_size = batch;
    o.seq_len = s;
    o.vocab_size = 100352;
    o.prefetch = prefetch;
    o.threads = threads;
    auto reader = dataloader::BatchReader::Create({store->get()}, sampler, sampler.Start(), o);
    for (int64_t i = 0; i < steps; ++i) {
      StatusOr<dataloader::Batch> b = (*reader)->Next();
      if (!b.ok()) {
        std::fprintf(stderr, "reader_bench: %s\n", b.status().ToString().c_str());
        std::exit(1);
      }
      checksum += static_cast<uint32_t>(b->tokens[0]);
    }
  };
  const double tokens = static_cast<double>(steps * batch * len);
  // The two alternate, an epoch each per round, after one unmeasured epoch of each.
  mmap_epoch();
  store_epoch();
  std::vector<double> mmap_times, store_times;
  for (int r = 0; r < reps; ++r) {
    mmap_times.push_back(bench::Seconds(mmap_epoch));
    store_times.push_back(bench::Seconds(store_epoch));
  }
  const double t_mmap = bench::Median(mmap_times), t_store = bench::Median(store_times);
  const bench::RoundRatio ratio = bench::RoundRatios(mmap_times, store_times);
  const std::string cpu = bench::CpuModel();
  std::printf(
      "{\"bench\": \"reader\", \"impl\": \"mmap_flat_file\", \"sequences\": %ld, \"seq_len\": %ld, "
      "\"batch\": %ld, \"tokens_per_s\": %.0f, \"seconds_median\": %.4f}\n",
      n, s, batch, tokens / t_mmap, t_mmap);
  std::printf(
      "{\"bench\": \"reader\", \"impl\": \"rocksdb_store_prefetch\", \"sequences\": %ld, "
      "\"seq_len\": %ld, \"batch\": %ld, \"prefetch\": %ld, \"threads\": %d, \"tokens_per_s\": "
      "%.0f, "
      "\"seconds_median\": %.4f, \"disk_bytes\": %lu}\n",
      n, s, batch, prefetch, threads, tokens / t_store, t_store,
      static_cast<unsigned long>((*store)->disk_bytes()));
  std::printf(
      "{\"bench\": \"reader\", \"summary\": true, \"rounds\": %d, \"store_over_mmap\": %.3f, "
      "\"store_over_mmap_min\": %.3f, \"store_over_mmap_max\": %.3f, \"cpu\": \"%s\", "
      "\"checksum\": %lu}\n",
      reps, ratio.median, ratio.min, ratio.max, cpu.c_str(), static_cast<unsigned long>(checksum));
  munmap(const_cast<uint32_t*>(mapped), bytes);
  ::close(fd);
  store->reset();
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace fullband

int main(int argc, char** argv) { return fullband::Run(argc, argv); }
