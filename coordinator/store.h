// Store: the coordinator's durable state in an embedded RocksDB (coordinator/FORMAT.md), with
// group commit: Append queues a batch of writes and returns its sequence number at once; one
// committer thread writes every queued batch as one WriteBatch with sync=true (WAL fsynced),
// then reports durability to the waiters. Batches become durable in Append order.
//
// Thread-safe. A failed write is sticky: every later wait returns the error (the in-memory
// state of the caller is then ahead of the disk, so nothing more may be acknowledged).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"

namespace rocksdb {
class DB;
class Env;
class FileSystem;
}  // namespace rocksdb

namespace fullband::coordinator {

struct WriteSet {
  std::vector<std::pair<std::string, std::string>> puts;
  std::vector<std::string> deletes;
  bool empty() const { return puts.empty() && deletes.empty(); }
};

class Store {
 public:
  // Opens (creating if missing) the store in `dir`; with `in_memory`, `dir` names a directory
  // of a RocksDB in-memory Env (tests). Writes or checks the "meta" record: DATA_LOSS when it
  // names another format or version, INTERNAL when RocksDB cannot open the directory.
  // `file_system` (tests): the file system under the store instead of the machine's (a
  // fault-injecting one); ignored with `in_memory`.
  static StatusOr<std::unique_ptr<Store>> Open(
      const std::string& dir, bool in_memory = false,
      std::shared_ptr<rocksdb::FileSystem> file_system = nullptr);
  ~Store();  // drains the queue (waiters are answered) and closes the database

  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Calls fn(key, value) for every key starting with `prefix` and not before `from` (when
  // given), in key order, at most `limit` times. INTERNAL on a read error, or the first non-OK
  // status fn returns.
  Status Scan(std::string_view prefix,
              const std::function<Status(std::string_view key, std::string_view value)>& fn,
              std::string_view from = {}, size_t limit = SIZE_MAX);

  // Queues `writes` and returns their sequence number (> 0). An empty set gets no number: the
  // last appended one is returned.
  uint64_t Append(WriteSet writes);
  uint64_t LastAppended() const;
  // Runs done(status) once every batch up to `seq` is durable (OK) or a write failed: inline
  // when that is already known, else on the committer thread. done must not block.
  void WhenDurable(uint64_t seq, std::function<void(const Status&)> done);
  // Blocks until WhenDurable(seq) would answer, and returns its status.
  Status WaitDurable(uint64_t seq);

  // Synced batches and batched writes so far (for benchmarks and tests of group commit).
  struct Stats {
    uint64_t synced_writes = 0;
    uint64_t batches = 0;
  };
  Stats stats() const;

 private:
  Store() = default;
  void CommitLoop();

  std::unique_ptr<rocksdb::Env> env_;  // the in-memory Env, or the owner-only one on disk
  std::unique_ptr<rocksdb::DB> db_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::pair<uint64_t, WriteSet>> queue_;
  std::vector<std::pair<uint64_t, std::function<void(const Status&)>>> waiters_;
  uint64_t appended_ = 0;
  uint64_t durable_ = 0;
  Status failed_;
  bool stop_ = false;
  Stats stats_;
  std::thread committer_;
};

}  // namespace fullband::coordinator
