// TokenStore: packed training sequences of S + 1 token ids, by index. The RocksDB store is the
// one `fullband ingest` writes and training reads (format: dataloader/FORMAT.md); the in-memory
// store serves tests. Readers open a RocksDB store read-only, so any number of processes may
// read one store at once, also while an ingest appends to it (they see its last commit).
//
// Every record carries a checksum of its index and tokens: a corrupt or truncated record is a
// DATA_LOSS naming the store and the index, never tokens. Reads are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/status.h"

namespace rocksdb {
class DB;
class Env;
class FileSystem;
class SstFileWriter;
class ColumnFamilyHandle;
}  // namespace rocksdb

namespace fullband::dataloader {

// One ingested input: what it was and what it gave.
struct StoreSource {
  std::string name;    // the path given to ingest ("-" for stdin)
  uint64_t bytes = 0;  // input bytes
  std::string xxh64;   // hex digest of the input bytes: re-ingesting them is a no-op
  int64_t documents = 0;
  int64_t tokens = 0;    // including one <|endoftext|> per document
  int64_t replaced = 0;  // invalid UTF-8 sequences replaced by U+FFFD

  bool operator==(const StoreSource&) const = default;
};

// The metadata record (FORMAT.md). Counts describe the last committed ingest.
struct StoreMetadata {
  static constexpr const char* kMagic = "fullband-token-store";
  static constexpr int64_t kVersion = 1;

  std::string tokenizer;       // "phi4"
  std::string tokenizer_hash;  // sha256 of the BPE ranks the ids came from
  int64_t vocab_size = 0;      // every id is < vocab_size
  int64_t seq_len = 0;         // S: each record holds S + 1 tokens
  int64_t num_sequences = 0;   // records 0 .. num_sequences − 1
  int64_t num_documents = 0;
  int64_t num_tokens = 0;      // num_sequences · (S + 1) + tail.size()
  std::vector<uint32_t> tail;  // tokens after the last full record, continued by the next ingest
  std::vector<StoreSource> sources;

  // The metadata record (FORMAT.md): everything but the sources, which are records of their
  // own; with_sources adds them as a list (for display).
  std::string ToJson(bool with_sources) const;
  // Parses a metadata record (sources left empty; *num_sources says how many it counts).
  // DATA_LOSS naming `where` when the text is not a valid metadata record of this version.
  static StatusOr<StoreMetadata> FromJson(std::string_view json, const std::string& where,
                                          int64_t* num_sources);
  static std::string SourceToJson(const StoreSource& source);
  static StatusOr<StoreSource> SourceFromJson(std::string_view json, const std::string& where);
  // DATA_LOSS when the counts contradict each other.
  Status CheckConsistent(const std::string& where) const;
  bool operator==(const StoreMetadata&) const = default;
};

class TokenStore {
 public:
  virtual ~TokenStore() = default;
  virtual const std::string& name() const = 0;  // the path, for errors and logs
  virtual int64_t num_sequences() const = 0;
  virtual int64_t seq_len() const = 0;     // S
  virtual int64_t vocab_size() const = 0;  // every id is below it
  // Reads the records `indices` into out (n, S + 1). OUT_OF_RANGE for an index outside
  // [0, num_sequences); DATA_LOSS naming the store and index for a record that is missing,
  // has the wrong length or checksum, or holds an id >= vocab_size.
  virtual Status Read(std::span<const int64_t> indices, uint32_t* out) const = 0;
};

// Records held in memory; for tests and small tools.
class MemoryTokenStore : public TokenStore {
 public:
  // `tokens` holds the records back to back; its size must be a multiple of S + 1.
  MemoryTokenStore(std::string name, int64_t seq_len, int64_t vocab_size,
                   std::vector<uint32_t> tokens);
  const std::string& name() const override { return name_; }
  int64_t num_sequences() const override;
  int64_t seq_len() const override { return seq_len_; }
  int64_t vocab_size() const override { return vocab_size_; }
  Status Read(std::span<const int64_t> indices, uint32_t* out) const override;

 private:
  std::string name_;
  int64_t seq_len_, vocab_size_;
  std::vector<uint32_t> tokens_;
};

// A store on disk, opened read-only.
class RocksDbTokenStore : public TokenStore {
 public:
  // NOT_FOUND when there is no store at `path`, or one that holds nothing committed (its first
  // ingest stopped early); DATA_LOSS when its metadata is missing beside records, unreadable, of
  // another format version, or inconsistent.
  static StatusOr<std::unique_ptr<RocksDbTokenStore>> Open(const std::string& path);
  ~RocksDbTokenStore() override;

  const std::string& name() const override { return path_; }
  int64_t num_sequences() const override { return metadata_.num_sequences; }
  int64_t seq_len() const override { return metadata_.seq_len; }
  int64_t vocab_size() const override { return metadata_.vocab_size; }
  Status Read(std::span<const int64_t> indices, uint32_t* out) const override;

  const StoreMetadata& metadata() const { return metadata_; }
  // Set when an ingest started and did not commit: what it said about itself (JSON). The store
  // still reads as of its last commit.
  const std::string& unfinished_ingest() const { return unfinished_ingest_; }
  // Bytes the store's files take on disk.
  uint64_t disk_bytes() const;

  struct VerifyReport {
    int64_t records = 0;                // records read
    int64_t bad_records = 0;            // wrong length, checksum or id range, or missing
    int64_t extra_records = 0;          // records past num_sequences (left by an unfinished ingest)
    std::vector<std::string> problems;  // the first few, each naming the index
  };
  // Reads every record and checks it against the metadata. `progress(done, total)` is called
  // now and then. Returns the report; a non-OK status only when the store cannot be read at all.
  StatusOr<VerifyReport> Verify(const std::function<void(int64_t, int64_t)>& progress) const;

 private:
  RocksDbTokenStore(std::string path, rocksdb::DB* db,
                    std::vector<rocksdb::ColumnFamilyHandle*> handles);
  Status CheckRecord(int64_t index, std::string_view value, uint32_t* out) const;

  std::string path_;
  rocksdb::DB* db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;  // [sequences, meta]
  StoreMetadata metadata_;
  std::string unfinished_ingest_;
};

// Appends records to a store and commits them with its metadata (Note [Ingest commit]).
// One writer per store at a time (RocksDB's lock enforces it: a second gets UNAVAILABLE).
class TokenStoreWriter {
 public:
  struct Identity {
    std::string tokenizer, tokenizer_hash;
    int64_t vocab_size = 0, seq_len = 0;
  };
  // Creates the store if missing, else checks that its tokenizer, vocabulary and seq_len equal
  // `identity` (FAILED_PRECONDITION naming both values otherwise). Removes records an
  // unfinished earlier ingest left past the committed count, then marks this ingest unfinished
  // with `description` until Commit. Everything is written through `file_system` (null: the
  // POSIX one; tests pass one that simulates a power loss).
  static StatusOr<std::unique_ptr<TokenStoreWriter>> Open(
      const std::string& path, const Identity& identity, const std::string& description,
      std::shared_ptr<rocksdb::FileSystem> file_system = nullptr);
  ~TokenStoreWriter();

  // The committed state plus what was appended since.
  const StoreMetadata& metadata() const { return metadata_; }
  bool HasSource(const std::string& xxh64) const;

  // Appends full records ((n, S + 1) tokens) after the last one, to a table file outside the
  // store until the next Commit.
  Status Append(std::span<const uint32_t> tokens);
  // Makes everything appended so far, `tail`, and the new `sources` durable and visible: adds
  // the table (synced) to the store, then writes the metadata in one synced write. Documents
  // and tokens are added to the counts.
  Status Commit(std::vector<uint32_t> tail, const std::vector<StoreSource>& sources);
  // Records appended since the last commit: a mark for RollbackTo.
  int64_t appended() const { return appended_; }
  // Drops the records appended after `mark` (0: everything since the last commit).
  Status RollbackTo(int64_t mark);
  Status Rollback() { return RollbackTo(0); }
  // Commits nothing more; clears the unfinished mark. Idempotent.
  Status Close();

 private:
  TokenStoreWriter(std::string path, rocksdb::DB* db,
                   std::vector<rocksdb::ColumnFamilyHandle*> handles);
  // Adds the table being written, if any, to the store (its records stay uncommitted).
  Status AddTable();

  std::string path_;
  std::unique_ptr<rocksdb::Env> env_;  // over the caller's file system; null: the default
  rocksdb::DB* db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  StoreMetadata metadata_;                  // as committed
  std::unordered_set<std::string> hashes_;  // of metadata_.sources
  int64_t appended_ = 0;  // records written past metadata_.num_sequences, not committed
  // Appended records go into a table file (SST) that Commit adds to the store whole.
  std::unique_ptr<rocksdb::SstFileWriter> table_;
  std::string table_path_;
  class TableSync;  // Note [Table write-back]
  std::unique_ptr<TableSync> table_sync_;
  uint64_t table_sync_at_ = 0;     // the table's size when a sync was last asked for
  int tables_ = 0;                 // written by this writer, for file names
  std::string value_;              // a record's value, reused
  bool compact_at_close_ = false;  // a range delete overlaps the tables
  bool closed_ = false;
};

}  // namespace fullband::dataloader
