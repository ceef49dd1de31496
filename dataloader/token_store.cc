#include "dataloader/token_store.h"

#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <unistd.h>
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <array>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/check.h"
#include "common/file_util.h"

namespace fullband::dataloader {
namespace {

constexpr const char* kSequencesFamily = "sequences";
constexpr const char* kMetaFamily = "meta";
constexpr const char* kMetadataKey = "metadata";
constexpr const char* kIngestKey = "ingest";
// Tables being written by TokenStoreWriter (Note [Ingest commit]); RocksDB ignores files of
// names it did not make.
constexpr std::string_view kTablePrefix = "fullband-ingest-";
// Past every record key.
const std::string kEndKey(9, '\xff');

// Note [Record layout]: key = the index as 8 bytes big-endian (so keys sort by index); value =
// (S + 1) little-endian uint32 ids followed by the little-endian XXH3-64 of those id bytes
// seeded with the index, so a record copied to the wrong key fails its check too.
std::string Key(int64_t index) {
  std::string key(8, '\0');
  for (int i = 0; i < 8; ++i)
    key[i] = static_cast<char>(static_cast<uint64_t>(index) >> (56 - 8 * i));
  return key;
}

int64_t IndexOfKey(std::string_view key) {
  uint64_t v = 0;
  for (unsigned char c : key) v = (v << 8) | c;
  return static_cast<int64_t>(v);
}

size_t ValueBytes(int64_t seq_len) { return static_cast<size_t>(seq_len + 1) * 4 + 8; }

// On x86 the library's dispatching entry point runs the widest XXH3 the CPU has (AVX2 or
// AVX-512, far fewer instructions per record than the SSE2 default); the value is the same.
uint64_t Checksum(int64_t index, const char* ids, size_t bytes) {
#if defined(__x86_64__)
  return XXH3_64bits_withSeed_dispatch(ids, bytes, static_cast<uint64_t>(index));
#else
  return XXH3_64bits_withSeed(ids, bytes, static_cast<uint64_t>(index));
#endif
}

// The value of record `index` into *value (resized; its buffer is reused across calls).
void EncodeRecord(int64_t index, const uint32_t* ids, int64_t n, std::string* value) {
  static_assert(std::endian::native == std::endian::little, "records are little-endian");
  value->resize(static_cast<size_t>(n) * 4 + 8);
  std::memcpy(value->data(), ids, static_cast<size_t>(n) * 4);
  const uint64_t sum = Checksum(index, value->data(), static_cast<size_t>(n) * 4);
  std::memcpy(value->data() + n * 4, &sum, 8);
}

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return OkStatus();
  const std::string msg = what + ": " + s.ToString();
  if (s.IsNotFound()) return NotFoundError(msg);
  if (s.IsCorruption()) return DataLossError(msg);
  if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) return UnavailableError(msg);
  if (s.IsBusy() || s.IsTimedOut() || s.IsTryAgain()) return UnavailableError(msg);
  return InternalError(msg);
}

// Note [Store tuning]: records are read one at a time in random order, far more often than
// they are written. Tables are uncompressed with small blocks (about two records) and a hash
// index inside each block; readers map the files and read blocks in place, without a block
// cache (no copy, no cache bookkeeping). bench/reader_bench read clearly faster with these
// settings than with RocksDB's defaults (32 KB blocks, block cache, block checksums verified on
// read).
rocksdb::Options StoreOptions(bool reader) {
  rocksdb::Options options;
  options.compression = rocksdb::kNoCompression;
  options.max_open_files = 512;
  rocksdb::BlockBasedTableOptions table;
  table.block_size = 4 << 10;
  table.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
  if (reader) {
    options.allow_mmap_reads = true;
    table.no_block_cache = true;
  }
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return options;
}

// A writer's options, for the store and its table files, writing through `env` (null: the
// default one).
rocksdb::Options WriterOptions(rocksdb::Env* env) {
  rocksdb::Options options = StoreOptions(/*reader=*/false);
  if (env != nullptr) options.env = env;
  return options;
}

std::vector<rocksdb::ColumnFamilyDescriptor> Families(const rocksdb::Options& options) {
  return {{rocksdb::kDefaultColumnFamilyName, options},
          {kSequencesFamily, options},
          {kMetaFamily, options}};
}

using json = nlohmann::json;

}  // namespace

// --- metadata --------------------------------------------------------------------------------

namespace {

json SourceJson(const StoreSource& s) {
  return {{"name", s.name},           {"bytes", s.bytes},   {"xxh64", s.xxh64},
          {"documents", s.documents}, {"tokens", s.tokens}, {"replaced", s.replaced}};
}

// "source/" + the source's index, zero-padded so that keys sort by index.
std::string SourceKey(size_t index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "source/%012zu", index);
  return buf;
}
constexpr std::string_view kSourcePrefix = "source/";

}  // namespace

std::string StoreMetadata::ToJson(bool with_sources) const {
  json j;
  j["magic"] = kMagic;
  j["version"] = kVersion;
  j["tokenizer"] = {{"name", tokenizer}, {"sha256", tokenizer_hash}};
  j["vocab_size"] = vocab_size;
  j["seq_len"] = seq_len;
  j["num_sequences"] = num_sequences;
  j["num_documents"] = num_documents;
  j["num_tokens"] = num_tokens;
  j["num_sources"] = sources.size();
  j["tail"] = tail;
  if (with_sources) {
    json srcs = json::array();
    for (const StoreSource& src : sources) srcs.push_back(SourceJson(src));
    j["sources"] = std::move(srcs);
  }
  return j.dump(1);
}

std::string StoreMetadata::SourceToJson(const StoreSource& source) {
  return SourceJson(source).dump();
}

StatusOr<StoreSource> StoreMetadata::SourceFromJson(std::string_view text,
                                                    const std::string& where) {
  json s = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (s.is_discarded()) return DataLossError(where + ": not JSON");
  try {
    return StoreSource{s.at("name").get<std::string>(),  s.at("bytes").get<uint64_t>(),
                       s.at("xxh64").get<std::string>(), s.at("documents").get<int64_t>(),
                       s.at("tokens").get<int64_t>(),    s.at("replaced").get<int64_t>()};
  } catch (const json::exception& e) {
    return DataLossError(where + ": " + e.what());
  }
}

StatusOr<StoreMetadata> StoreMetadata::FromJson(std::string_view text, const std::string& where,
                                                int64_t* num_sources) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return DataLossError(where + ": the metadata record is not JSON");
  }
  if (j.value("magic", "") != kMagic) {
    return DataLossError(where + ": not a fullband token store (metadata magic is " +
                         j.value("magic", json("missing")).dump() + ")");
  }
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"] != kVersion) {
    return DataLossError(where + ": store format version " + j.value("version", json()).dump() +
                         ", this fullband reads version " + std::to_string(kVersion));
  }
  StoreMetadata m;
  try {
    m.tokenizer = j.at("tokenizer").at("name").get<std::string>();
    m.tokenizer_hash = j.at("tokenizer").at("sha256").get<std::string>();
    m.vocab_size = j.at("vocab_size").get<int64_t>();
    m.seq_len = j.at("seq_len").get<int64_t>();
    m.num_sequences = j.at("num_sequences").get<int64_t>();
    m.num_documents = j.at("num_documents").get<int64_t>();
    m.num_tokens = j.at("num_tokens").get<int64_t>();
    *num_sources = j.at("num_sources").get<int64_t>();
    m.tail = j.at("tail").get<std::vector<uint32_t>>();
  } catch (const json::exception& e) {
    return DataLossError(where + ": metadata record: " + e.what());
  }
  return m;
}

Status StoreMetadata::CheckConsistent(const std::string& where) const {
  auto bad = [&](const std::string& what) { return DataLossError(where + ": metadata: " + what); };
  if (seq_len < 1) return bad("seq_len " + std::to_string(seq_len) + " < 1");
  if (vocab_size < 1) return bad("vocab_size " + std::to_string(vocab_size) + " < 1");
  if (num_sequences < 0) return bad("num_sequences < 0");
  if (static_cast<int64_t>(tail.size()) > seq_len) {
    return bad("the tail holds " + std::to_string(tail.size()) + " tokens, a full record " +
               std::to_string(seq_len + 1));
  }
  if (num_tokens != num_sequences * (seq_len + 1) + static_cast<int64_t>(tail.size())) {
    return bad("num_tokens " + std::to_string(num_tokens) +
               " != num_sequences × (seq_len + 1) + "
               "tail = " +
               std::to_string(num_sequences * (seq_len + 1) + tail.size()));
  }
  int64_t tokens = 0, documents = 0;
  for (const StoreSource& s : sources) {
    tokens += s.tokens;
    documents += s.documents;
  }
  if (tokens != num_tokens) {
    return bad("sources hold " + std::to_string(tokens) + " tokens, num_tokens is " +
               std::to_string(num_tokens));
  }
  if (documents != num_documents) {
    return bad("sources hold " + std::to_string(documents) + " documents, num_documents is " +
               std::to_string(num_documents));
  }
  for (uint32_t id : tail) {
    if (id >= vocab_size) return bad("tail id " + std::to_string(id) + " >= vocab_size");
  }
  return OkStatus();
}

namespace {

// Reads the metadata record and every source record from the meta family. NOT_FOUND when
// there is no metadata record (a new store); DATA_LOSS when anything is malformed or the
// counts disagree.
StatusOr<StoreMetadata> LoadMetadata(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* meta,
                                     const std::string& path) {
  std::string text;
  const rocksdb::Status got = db->Get(rocksdb::ReadOptions(), meta, kMetadataKey, &text);
  if (got.IsNotFound()) return NotFoundError(path + ": the metadata record is missing");
  FB_RETURN_IF_ERROR(FromRocks(got, path + ": metadata"));
  int64_t num_sources = 0;
  FB_ASSIGN_OR_RETURN(StoreMetadata m, StoreMetadata::FromJson(text, path, &num_sources));
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), meta));
  for (it->Seek(std::string(kSourcePrefix)); it->Valid(); it->Next()) {
    const std::string_view key = it->key().ToStringView();
    if (key.substr(0, kSourcePrefix.size()) != kSourcePrefix) break;
    if (key != SourceKey(m.sources.size())) {
      return DataLossError(path + ": source record " + std::string(key) + " where " +
                           SourceKey(m.sources.size()) + " was expected");
    }
    FB_ASSIGN_OR_RETURN(
        StoreSource src,
        StoreMetadata::SourceFromJson(it->value().ToStringView(), path + ": " + std::string(key)));
    m.sources.push_back(std::move(src));
  }
  FB_RETURN_IF_ERROR(FromRocks(it->status(), path + ": reading source records"));
  if (static_cast<int64_t>(m.sources.size()) < num_sources) {
    return DataLossError(path + ": metadata names " + std::to_string(num_sources) +
                         " sources, the store holds " + std::to_string(m.sources.size()) +
                         " source records");
  }
  m.sources.resize(static_cast<size_t>(num_sources));  // later ones: an uncommitted ingest
  FB_RETURN_IF_ERROR(m.CheckConsistent(path));
  return m;
}

}  // namespace

// --- in memory -------------------------------------------------------------------------------

MemoryTokenStore::MemoryTokenStore(std::string name, int64_t seq_len, int64_t vocab_size,
                                   std::vector<uint32_t> tokens)
    : name_(std::move(name)),
      seq_len_(seq_len),
      vocab_size_(vocab_size),
      tokens_(std::move(tokens)) {
  FB_CHECK_EQ(tokens_.size() % static_cast<size_t>(seq_len_ + 1), 0u);
}

int64_t MemoryTokenStore::num_sequences() const {
  return static_cast<int64_t>(tokens_.size()) / (seq_len_ + 1);
}

Status MemoryTokenStore::Read(std::span<const int64_t> indices, uint32_t* out) const {
  const size_t n = static_cast<size_t>(seq_len_ + 1);
  for (int64_t index : indices) {
    if (index < 0 || index >= num_sequences()) {
      return OutOfRangeError(name_ + ": sequence " + std::to_string(index) + " of " +
                             std::to_string(num_sequences()));
    }
    std::memcpy(out, tokens_.data() + index * n, n * 4);
    out += n;
  }
  return OkStatus();
}

// --- RocksDB, read-only ----------------------------------------------------------------------

RocksDbTokenStore::RocksDbTokenStore(std::string path, rocksdb::DB* db,
                                     std::vector<rocksdb::ColumnFamilyHandle*> handles)
    : path_(std::move(path)), db_(db), handles_(std::move(handles)) {}

RocksDbTokenStore::~RocksDbTokenStore() {
  for (auto* h : handles_) db_->DestroyColumnFamilyHandle(h).PermitUncheckedError();
  delete db_;
}

StatusOr<std::unique_ptr<RocksDbTokenStore>> RocksDbTokenStore::Open(const std::string& path) {
  if (!std::filesystem::exists(std::filesystem::path(path) / "CURRENT")) {
    return NotFoundError(path + ": no token store here (write one with `fullband ingest`)");
  }
  rocksdb::Options options = StoreOptions(/*reader=*/true);
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  const rocksdb::Status s =
      rocksdb::DB::OpenForReadOnly(options, path, Families(options), &handles, &db);
  if (!s.ok()) {
    if (s.IsInvalidArgument()) {
      return DataLossError(path + ": not a fullband token store (" + s.ToString() + ")");
    }
    return FromRocks(s, path);
  }
  // handles: [default, sequences, meta]; the default family is unused.
  db->DestroyColumnFamilyHandle(handles[0]).PermitUncheckedError();
  std::unique_ptr<RocksDbTokenStore> store(
      new RocksDbTokenStore(path, db, {handles[1], handles[2]}));
  StatusOr<StoreMetadata> m = LoadMetadata(db, handles[2], path);
  if (!m.ok()) {
    if (m.status().code() != StatusCode::kNotFound) return m.status();
    // No metadata and no records: the first ingest stopped (or the power went) before it
    // marked itself; that ingest, run again, goes on from here.
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), handles[1]));
    it->SeekToFirst();
    if (!it->Valid() && it->status().ok()) {
      return NotFoundError(path +
                           ": the token store holds nothing yet: the ingest that created it "
                           "stopped before it committed (run `fullband ingest` again)");
    }
    return DataLossError(m.status().message());
  }
  store->metadata_ = std::move(*m);
  const rocksdb::Status got =
      db->Get(rocksdb::ReadOptions(), handles[2], kIngestKey, &store->unfinished_ingest_);
  if (!got.ok() && !got.IsNotFound()) return FromRocks(got, path + ": ingest mark");
  return store;
}

Status RocksDbTokenStore::CheckRecord(int64_t index, std::string_view value, uint32_t* out) const {
  const int64_t n = metadata_.seq_len + 1;
  if (value.size() != ValueBytes(metadata_.seq_len)) {
    return DataLossError(path_ + ": sequence " + std::to_string(index) + ": record of " +
                         std::to_string(value.size()) + " bytes, expected " +
                         std::to_string(ValueBytes(metadata_.seq_len)));
  }
  uint64_t sum;
  std::memcpy(&sum, value.data() + n * 4, 8);
  if (sum != Checksum(index, value.data(), static_cast<size_t>(n) * 4)) {
    return DataLossError(path_ + ": sequence " + std::to_string(index) + ": checksum mismatch");
  }
  // Copy, then range-check the copy (in L1 now; a plain max loop the compiler vectorizes).
  std::memcpy(out, value.data(), static_cast<size_t>(n) * 4);
  uint32_t worst = 0;
  for (int64_t i = 0; i < n; ++i) worst = std::max(worst, out[i]);
  if (worst >= metadata_.vocab_size) {
    return DataLossError(path_ + ": sequence " + std::to_string(index) + ": id " +
                         std::to_string(worst) + " >= vocab_size " +
                         std::to_string(metadata_.vocab_size));
  }
  return OkStatus();
}

Status RocksDbTokenStore::Read(std::span<const int64_t> indices, uint32_t* out) const {
  // Each record carries its own checksum (Note [Record layout]), checked below; re-verifying
  // the table block around every record on each read would double the work.
  rocksdb::ReadOptions read;
  read.verify_checksums = false;
  const size_t n = static_cast<size_t>(metadata_.seq_len + 1);
  // Groups of up to kGroup records, in key order (MultiGet then walks each table once), with
  // every buffer on the stack.
  constexpr size_t kGroup = 32;
  for (size_t first = 0; first < indices.size(); first += kGroup) {
    const size_t count = std::min(kGroup, indices.size() - first);
    std::array<size_t, kGroup> order;
    for (size_t i = 0; i < count; ++i) {
      const int64_t index = indices[first + i];
      if (index < 0 || index >= metadata_.num_sequences) {
        return OutOfRangeError(path_ + ": sequence " + std::to_string(index) + " of " +
                               std::to_string(metadata_.num_sequences));
      }
      order[i] = first + i;
    }
    std::sort(order.begin(), order.begin() + count,
              [&](size_t x, size_t y) { return indices[x] < indices[y]; });
    std::array<char[8], kGroup> keys;
    std::array<rocksdb::Slice, kGroup> slices;
    for (size_t i = 0; i < count; ++i) {
      const uint64_t v = static_cast<uint64_t>(indices[order[i]]);
      for (int b = 0; b < 8; ++b) keys[i][b] = static_cast<char>(v >> (56 - 8 * b));
      slices[i] = rocksdb::Slice(keys[i], 8);
    }
    // RocksDB copies each value into its PinnableSlice (blocks read through the mapping are not
    // pinned); kept per thread, their buffers are allocated once.
    static thread_local std::array<rocksdb::PinnableSlice, kGroup> values;
    std::array<rocksdb::Status, kGroup> statuses;
    db_->MultiGet(read, handles_[0], count, slices.data(), values.data(), statuses.data(),
                  /*sorted_input=*/true);
    Status status;
    for (size_t i = 0; i < count && status.ok(); ++i) {
      const int64_t index = indices[order[i]];
      if (statuses[i].IsNotFound()) {
        status = DataLossError(path_ + ": sequence " + std::to_string(index) + " is missing");
      } else if (!statuses[i].ok()) {
        status = FromRocks(statuses[i], path_ + ": sequence " + std::to_string(index));
      } else {
        status = CheckRecord(index, values[i].ToStringView(), out + order[i] * n);
      }
    }
    for (size_t i = 0; i < count; ++i) values[i].Reset();
    FB_RETURN_IF_ERROR(status);
  }
  return OkStatus();
}

uint64_t RocksDbTokenStore::disk_bytes() const {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(path_, ec)) {
    if (e.is_regular_file(ec)) total += e.file_size(ec);
  }
  return total;
}

StatusOr<RocksDbTokenStore::VerifyReport> RocksDbTokenStore::Verify(
    const std::function<void(int64_t, int64_t)>& progress) const {
  VerifyReport report;
  auto problem = [&](std::string what) {
    ++report.bad_records;
    if (report.problems.size() < 20) report.problems.push_back(std::move(what));
  };
  std::vector<uint32_t> ids(static_cast<size_t>(metadata_.seq_len + 1));
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), handles_[0]));
  int64_t expected = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice key = it->key();
    if (key.size() != 8) {
      problem(path_ + ": a record key of " + std::to_string(key.size()) + " bytes");
      continue;
    }
    const int64_t index = IndexOfKey(key.ToStringView());
    if (index >= metadata_.num_sequences) {
      ++report.extra_records;
      continue;
    }
    for (; expected < index; ++expected) {
      problem(path_ + ": sequence " + std::to_string(expected) + " is missing");
    }
    expected = index + 1;
    ++report.records;
    const Status s = CheckRecord(index, it->value().ToStringView(), ids.data());
    if (!s.ok()) problem(s.message());
    if (progress && report.records % 65536 == 0) progress(report.records, metadata_.num_sequences);
  }
  FB_RETURN_IF_ERROR(FromRocks(it->status(), path_ + ": reading records"));
  for (; expected < metadata_.num_sequences; ++expected) {
    problem(path_ + ": sequence " + std::to_string(expected) + " is missing");
  }
  if (progress) progress(report.records, metadata_.num_sequences);
  return report;
}

// --- writer ----------------------------------------------------------------------------------

TokenStoreWriter::TokenStoreWriter(std::string path, rocksdb::DB* db,
                                   std::vector<rocksdb::ColumnFamilyHandle*> handles)
    : path_(std::move(path)), db_(db), handles_(std::move(handles)) {}

// Note [Table write-back]: a table must be on disk before it is added to the store, and the
// sync that Finish does takes time in proportion to the bytes written since the last one on a
// virtual disk (even with the file written back as it grew), all of it a stall at commit. A
// thread syncs the file every kTableSyncBytes while records are still being appended, so
// Finish only waits for the sync in progress, the bytes written since and the writer's buffer
// (kTableBufferBytes, not yet in the file). It waits on the disk, not on a core. Of the sizes
// tried (syncs every 4 MB or 1 MB, buffers of 1 MB or 256 KB), the smallest of both gave the
// shortest commit.
constexpr size_t kTableBufferBytes = 256 << 10;

class TokenStoreWriter::TableSync {
 public:
  static constexpr uint64_t kTableSyncBytes = 1 << 20;

  static StatusOr<std::unique_ptr<TableSync>> Open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return InternalError(path + ": opening to sync: " + std::strerror(errno));
    return std::unique_ptr<TableSync>(new TableSync(path, fd));
  }
  ~TableSync() {
    Stop().IgnoreError();
    ::close(fd_);
  }

  // Asks for everything written so far to be synced; returns at once (requests coalesce).
  void Request() {
    std::lock_guard<std::mutex> lock(mu_);
    requested_ = true;
    cv_.notify_one();
  }
  // Waits for a sync in progress and ends the thread; the first sync error, if any.
  Status Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      cv_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
    return error_;
  }

 private:
  TableSync(std::string path, int fd) : path_(std::move(path)), fd_(fd) {
    thread_ = std::thread([this] { Loop(); });
  }
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return requested_ || stop_; });
      if (stop_) return;
      requested_ = false;
      lock.unlock();
      const bool failed = ::fdatasync(fd_) != 0;
      const int err = errno;
      lock.lock();
      if (failed && error_.ok()) {
        error_ = InternalError(path_ + ": syncing the table: " + std::strerror(err));
      }
    }
  }

  const std::string path_;
  const int fd_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool requested_ = false;  // guarded by mu_
  bool stop_ = false;       // guarded by mu_
  Status error_;            // guarded by mu_ while the thread runs
};

TokenStoreWriter::~TokenStoreWriter() {
  if (!closed_) Close().IgnoreError();
  if (table_) {  // Close failed before adding it
    table_sync_.reset();
    table_.reset();
    std::error_code ec;
    std::filesystem::remove(table_path_, ec);
  }
  for (auto* h : handles_) db_->DestroyColumnFamilyHandle(h).PermitUncheckedError();
  delete db_;
}

StatusOr<std::unique_ptr<TokenStoreWriter>> TokenStoreWriter::Open(
    const std::string& path, const Identity& identity, const std::string& description,
    std::shared_ptr<rocksdb::FileSystem> file_system) {
  std::unique_ptr<rocksdb::Env> env;
  if (file_system != nullptr) env = rocksdb::NewCompositeEnv(file_system);
  rocksdb::Options options = WriterOptions(env.get());
  options.create_if_missing = true;
  options.create_missing_column_families = true;
  DisableBackgroundRecovery(&options);  // Note [No background recovery]
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  FB_RETURN_IF_ERROR(
      FromRocks(rocksdb::DB::Open(options, path, Families(options), &handles, &db), path));
  db->DestroyColumnFamilyHandle(handles[0]).PermitUncheckedError();
  std::unique_ptr<TokenStoreWriter> w(new TokenStoreWriter(path, db, {handles[1], handles[2]}));
  w->env_ = std::move(env);
  // The store's own directory entry, when this created it.
  FB_RETURN_IF_ERROR(FsyncDirectory(ParentDirectory(path), file_system.get()));

  StatusOr<StoreMetadata> loaded = LoadMetadata(db, handles[2], path);
  if (!loaded.ok() && loaded.status().code() == StatusCode::kNotFound) {
    w->metadata_.tokenizer = identity.tokenizer;
    w->metadata_.tokenizer_hash = identity.tokenizer_hash;
    w->metadata_.vocab_size = identity.vocab_size;
    w->metadata_.seq_len = identity.seq_len;
  } else {
    if (!loaded.ok()) return loaded.status();
    w->metadata_ = std::move(*loaded);
    const StoreMetadata& m = w->metadata_;
    auto differs = [&](const char* what, const std::string& store, const std::string& asked) {
      return FailedPreconditionError(path + ": the store was written with " + what + " " + store +
                                     ", this ingest uses " + asked);
    };
    if (m.seq_len != identity.seq_len) {
      return differs("seq_len", std::to_string(m.seq_len), std::to_string(identity.seq_len));
    }
    if (m.tokenizer != identity.tokenizer || m.tokenizer_hash != identity.tokenizer_hash) {
      return differs("tokenizer", m.tokenizer + " (" + m.tokenizer_hash + ")",
                     identity.tokenizer + " (" + identity.tokenizer_hash + ")");
    }
    if (m.vocab_size != identity.vocab_size) {
      return differs("vocab_size", std::to_string(m.vocab_size),
                     std::to_string(identity.vocab_size));
    }
  }
  // A table an ingest was writing when it stopped holds nothing committed.
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(path, ec)) {
    if (e.path().filename().string().starts_with(kTablePrefix)) {
      std::filesystem::remove(e.path(), ec);
    }
  }
  // Records past the committed count belong to an ingest that stopped between adding its
  // table and committing. Deleting them leaves a range tombstone that tables added later
  // overlap, so Close compacts.
  rocksdb::WriteBatch batch;
  {
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), handles[1]));
    it->Seek(Key(w->metadata_.num_sequences));
    FB_RETURN_IF_ERROR(FromRocks(it->status(), path + ": looking for uncommitted records"));
    if (it->Valid()) {
      FB_RETURN_IF_ERROR(
          FromRocks(batch.DeleteRange(handles[1], Key(w->metadata_.num_sequences), kEndKey), path));
      w->compact_at_close_ = true;
    }
  }
  FB_RETURN_IF_ERROR(FromRocks(batch.Put(handles[2], kIngestKey, description), path));
  FB_RETURN_IF_ERROR(
      FromRocks(batch.Put(handles[2], kMetadataKey, w->metadata_.ToJson(false)), path));
  for (const StoreSource& src : w->metadata_.sources) w->hashes_.insert(src.xxh64);
  rocksdb::WriteOptions sync;
  sync.sync = true;
  FB_RETURN_IF_ERROR(FromRocks(db->Write(sync, &batch), path + ": marking the ingest"));
  return w;
}

bool TokenStoreWriter::HasSource(const std::string& xxh64) const {
  return hashes_.count(xxh64) > 0;
}

Status TokenStoreWriter::Append(std::span<const uint32_t> tokens) {
  const int64_t n = metadata_.seq_len + 1;
  FB_CHECK_EQ(tokens.size() % static_cast<size_t>(n), 0u);
  if (tokens.empty()) return OkStatus();
  if (!table_) {
    table_path_ = (std::filesystem::path(path_) /
                   (std::string(kTablePrefix) + std::to_string(tables_++) + ".sst"))
                      .string();
    rocksdb::EnvOptions env;
    env.writable_file_max_buffer_size = kTableBufferBytes;
    auto table =
        std::make_unique<rocksdb::SstFileWriter>(env, WriterOptions(env_.get()), handles_[0],
                                                 /*invalidate_page_cache=*/false);
    FB_RETURN_IF_ERROR(FromRocks(table->Open(table_path_), table_path_));
    StatusOr<std::unique_ptr<TableSync>> sync = TableSync::Open(table_path_);
    if (!sync.ok()) {  // the next Open removes the empty file
      table.reset();
      return sync.status();
    }
    table_ = std::move(table);
    table_sync_ = std::move(*sync);
    table_sync_at_ = 0;
  }
  for (size_t at = 0; at < tokens.size(); at += static_cast<size_t>(n)) {
    const int64_t index = metadata_.num_sequences + appended_;
    EncodeRecord(index, tokens.data() + at, n, &value_);
    FB_RETURN_IF_ERROR(FromRocks(table_->Put(Key(index), value_), table_path_));
    ++appended_;
  }
  if (table_->FileSize() >= table_sync_at_ + TableSync::kTableSyncBytes) {
    table_sync_at_ = table_->FileSize();
    table_sync_->Request();
  }
  return OkStatus();
}

Status TokenStoreWriter::AddTable() {
  if (!table_) return OkStatus();
  std::unique_ptr<rocksdb::SstFileWriter> table = std::move(table_);
  const Status synced = table_sync_->Stop();
  table_sync_.reset();
  FB_RETURN_IF_ERROR(synced);
  FB_RETURN_IF_ERROR(FromRocks(table->Finish(), table_path_));  // synced
  rocksdb::IngestExternalFileOptions add;
  add.move_files = true;           // a hard link into the store, no copy
  add.write_global_seqno = false;  // the sequence number lives in the MANIFEST
  return FromRocks(db_->IngestExternalFile(handles_[0], {table_path_}, add),
                   path_ + ": adding " + table_path_);
}

Status TokenStoreWriter::Commit(std::vector<uint32_t> tail,
                                const std::vector<StoreSource>& sources) {
  StoreMetadata next = metadata_;
  next.num_sequences += appended_;
  next.tail = std::move(tail);
  for (const StoreSource& s : sources) {
    next.sources.push_back(s);
    next.num_documents += s.documents;
  }
  next.num_tokens =
      next.num_sequences * (next.seq_len + 1) + static_cast<int64_t>(next.tail.size());
  FB_RETURN_IF_ERROR(next.CheckConsistent(path_ + " (commit)"));
  FB_RETURN_IF_ERROR(AddTable());
  // The new source records and the metadata that counts them, in one synced write.
  rocksdb::WriteBatch batch;
  for (size_t i = metadata_.sources.size(); i < next.sources.size(); ++i) {
    FB_RETURN_IF_ERROR(FromRocks(
        batch.Put(handles_[1], SourceKey(i), StoreMetadata::SourceToJson(next.sources[i])), path_));
  }
  FB_RETURN_IF_ERROR(FromRocks(batch.Put(handles_[1], kMetadataKey, next.ToJson(false)), path_));
  rocksdb::WriteOptions sync;
  sync.sync = true;
  FB_RETURN_IF_ERROR(FromRocks(db_->Write(sync, &batch), path_ + ": committing"));
  for (const StoreSource& src : sources) hashes_.insert(src.xxh64);
  metadata_ = std::move(next);
  appended_ = 0;
  return OkStatus();
}

Status TokenStoreWriter::RollbackTo(int64_t mark) {
  FB_CHECK(mark >= 0 && mark <= appended_) << "rollback mark " << mark << " of " << appended_;
  if (appended_ == mark) return OkStatus();
  // A table cannot drop keys: add it, then delete its records past the mark (rare: a failing
  // input). Later tables overlap the tombstone, so Close compacts.
  FB_RETURN_IF_ERROR(AddTable());
  const rocksdb::Status s =
      db_->DeleteRange(rocksdb::WriteOptions(), handles_[0], Key(metadata_.num_sequences + mark),
                       Key(metadata_.num_sequences + appended_));
  appended_ = mark;
  compact_at_close_ = true;
  return FromRocks(s, path_ + ": rolling back");
}

Status TokenStoreWriter::Close() {
  if (closed_) return OkStatus();
  closed_ = true;
  FB_RETURN_IF_ERROR(Rollback());
  rocksdb::WriteOptions sync;
  sync.sync = true;
  FB_RETURN_IF_ERROR(FromRocks(db_->Delete(sync, handles_[1], kIngestKey), path_ + ": closing"));
  if (!compact_at_close_) return OkStatus();  // the tables already form one sorted run
  rocksdb::CompactRangeOptions compact;
  compact.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForceOptimized;
  return FromRocks(db_->CompactRange(compact, handles_[0], nullptr, nullptr),
                   path_ + ": compacting");
}

}  // namespace fullband::dataloader
