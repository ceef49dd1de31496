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

// The ids are drawn below the vocabulary size of cl100k (and of the demo model).
constexpr int64_t kVocab = 100352;

// Writes `n` records of `len` = seq_len + 1 ids into a new token store at `path`. False, with
// a line on stderr when the store cannot be opened.
bool WriteStore(const std::string& path, const std::vector<uint32_t>& ids, int64_t n,
                int64_t seq_len) {
  const int64_t len = seq_len + 1;
  auto w = dataloader::TokenStoreWriter::Open(path, {"bench", "-", kVocab, seq_len}, "{}");
  if (!w.ok()) {
    std::fprintf(stderr, "reader_bench: %s\n", w.status().ToString().c_str());
    return false;
  }
  const int64_t step = 4096;
  for (int64_t at = 0; at < n; at += step) {
    const int64_t k = std::min(step, n - at);
    if (!(*w)->Append({ids.data() + at * len, static_cast<size_t>(k * len)}).ok()) return false;
  }
  dataloader::StoreSource src{"random", ids.size() * 4, "0", 1, static_cast<int64_t>(ids.size()),
                              0};
  return (*w)->Commit({}, {src}).ok() && (*w)->Close().ok();
}

// A file mapped read-only, unmapped and closed with this object.
class MappedFile {
 public:
  MappedFile(const std::string& path, size_t bytes) : bytes_(bytes) {
    fd_ = ::open(path.c_str(), O_RDONLY);
    data_ = static_cast<const uint32_t*>(mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd_, 0));
  }
  ~MappedFile() {
    munmap(const_cast<uint32_t*>(data_), bytes_);
    ::close(fd_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint32_t* data() const { return data_; }

 private:
  size_t bytes_;
  int fd_ = -1;
  const uint32_t* data_ = nullptr;
};

// An epoch of both ways of reading, in the sampler's order: `steps` batches of `batch`
// sequences of `len` ids. Each adds a batch's first token to `checksum`.
struct Epochs {
  const Args& args;
  const Sampler& sampler;
  const uint32_t* mapped;
  const dataloader::TokenStore* store;
  int64_t steps, len;
  std::vector<int32_t> out;
  uint64_t checksum = 0;

  // Baseline: each sequence copied out of the mapping.
  void Mmap() {
    dataloader::SamplerCursor c = sampler.Start();
    std::vector<Sampler::Draw> draws;
    for (int64_t i = 0; i < steps; ++i) {
      sampler.NextBatch(0, 1, args.batch, &c, &draws);
      for (int64_t r = 0; r < args.batch; ++r) {
        const uint32_t* from = mapped + draws[r].index * len;
        for (int64_t t = 0; t < len; ++t) out[r * len + t] = static_cast<int32_t>(from[t]);
      }
      checksum += static_cast<uint32_t>(out[0]);
    }
  }

  // Through a BatchReader over the store. Exits 1 when a read fails.
  void Store() {
    dataloader::ReaderOptions o;
    o.batch_size = args.batch;
    o.seq_len = args.seq_len;
    o.vocab_size = kVocab;
    o.prefetch = args.prefetch;
    o.threads = args.threads;
    auto reader = dataloader::BatchReader::Create({store}, sampler, sampler.Start(), o);
    for (int64_t i = 0; i < steps; ++i) {
      StatusOr<dataloader::Batch> b = (*reader)->Next();
      if (!b.ok()) {
        std::fprintf(stderr, "reader_bench: %s\n", b.status().ToString().c_str());
        std::exit(1);
      }
      checksum += static_cast<uint32_t>(b->tokens[0]);
    }
  }
};

// One JSON line per measurement (median epoch), then the ratio.
void PrintResults(const Args& a, double tokens, const std::vector<double>& mmap_times,
                  const std::vector<double>& store_times, uint64_t disk_bytes, uint64_t checksum) {
  const double t_mmap = bench::Median(mmap_times), t_store = bench::Median(store_times);
  const bench::RoundRatio ratio = bench::RoundRatios(mmap_times, store_times);
  const std::string cpu = bench::CpuModel();
  std::printf(
      "{\"bench\": \"reader\", \"impl\": \"mmap_flat_file\", \"sequences\": %ld, \"seq_len\": %ld, "
      "\"batch\": %ld, \"tokens_per_s\": %.0f, \"seconds_median\": %.4f}\n",
      a.sequences, a.seq_len, a.batch, tokens / t_mmap, t_mmap);
  std::printf(
      "{\"bench\": \"reader\", \"impl\": \"rocksdb_store_prefetch\", \"sequences\": %ld, "
      "\"seq_len\": %ld, \"batch\": %ld, \"prefetch\": %ld, \"threads\": %d, \"tokens_per_s\": "
      "%.0f, "
      "\"seconds_median\": %.4f, \"disk_bytes\": %lu}\n",
      a.sequences, a.seq_len, a.batch, a.prefetch, a.threads, tokens / t_store, t_store,
      static_cast<unsigned long>(disk_bytes));
  std::printf(
      "{\"bench\": \"reader\", \"summary\": true, \"rounds\": %d, \"store_over_mmap\": %.3f, "
      "\"store_over_mmap_min\": %.3f, \"store_over_mmap_max\": %.3f, \"cpu\": \"%s\", "
      "\"checksum\": %lu}\n",
      a.reps, ratio.median, ratio.min, ratio.max, cpu.c_str(),
      static_cast<unsigned long>(checksum));
}

// The two alternate, an epoch each per round, after one unmeasured epoch of each.
void Measure(const Args& args, const uint32_t* mapped, const dataloader::RocksDbTokenStore* store) {
  const int64_t len = args.seq_len + 1, steps = args.sequences / args.batch;  // one epoch
  const Sampler sampler = Sampler::Create({args.sequences}, {1.0}, 7).value();
  Epochs e{args,
           sampler,
           mapped,
           store,
           steps,
           len,
           std::vector<int32_t>(static_cast<size_t>(args.batch * len))};
  e.Mmap();
  e.Store();
  std::vector<double> mmap_times, store_times;
  for (int r = 0; r < args.reps; ++r) {
    mmap_times.push_back(bench::Seconds([&] { e.Mmap(); }));
    store_times.push_back(bench::Seconds([&] { e.Store(); }));
  }
  PrintResults(args, static_cast<double>(steps * args.batch * len), mmap_times, store_times,
               store->disk_bytes(), e.checksum);
}

int Run(int argc, char** argv) {
  Args args;
  if (const std::optional<int> exit = ParseArgs(argc, argv, &args)) return *exit;
  const std::string& dir = args.dir;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);

  // The same random ids into a flat file and a store.
  std::vector<uint32_t> ids(static_cast<size_t>(args.sequences * (args.seq_len + 1)));
  Rng rng(1);
  for (uint32_t& id : ids) id = static_cast<uint32_t>(rng.Below(kVocab));
  const std::string flat = dir + "/tokens.bin";
  std::ofstream(flat, std::ios::binary)
      .write(reinterpret_cast<const char*>(ids.data()),
             static_cast<std::streamsize>(ids.size() * 4));
  const std::string path = dir + "/store";
  if (!WriteStore(path, ids, args.sequences, args.seq_len)) return 1;
  auto store = dataloader::RocksDbTokenStore::Open(path);
  if (!store.ok()) {
    std::fprintf(stderr, "reader_bench: %s\n", store.status().ToString().c_str());
    return 1;
  }
  {
    const MappedFile mapped(flat, ids.size() * 4);
    ids.clear();
    ids.shrink_to_fit();
    Measure(args, mapped.data(), store->get());
  }
  store->reset();
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace fullband

int main(int argc, char** argv) { return fullband::Run(argc, argv); }
