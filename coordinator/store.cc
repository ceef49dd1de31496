#include "coordinator/store.h"

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/file_util.h"
#include "common/logging.h"
#include "proto/coordinator_store.pb.h"

namespace fullband::coordinator {
namespace {

constexpr char kMagic[] = "fullband-coordinator";
constexpr int kVersion = 2;  // coordinator/FORMAT.md

Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return OkStatus();
  return InternalError(std::string(what) + ": " + s.ToString());
}

}  // namespace

namespace {

// Every file RocksDB creates in the store is made owner-only (0600) as soon as it exists; the
// directory is 0700 already, so no other user reaches one in between.
class OwnerOnlyFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  using rocksdb::FileSystemWrapper::FileSystemWrapper;
  static const char* kClassName() { return "FullbandOwnerOnlyFileSystem"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* d) override {
    return Restrict(f, target()->NewWritableFile(f, o, r, d));
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* d) override {
    return Restrict(f, target()->ReopenWritableFile(f, o, r, d));
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                                      const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* d) override {
    return Restrict(f, target()->ReuseWritableFile(f, old, o, r, d));
  }
  rocksdb::IOStatus NewRandomRWFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>* r,
                                    rocksdb::IODebugContext* d) override {
    return Restrict(f, target()->NewRandomRWFile(f, o, r, d));
  }
  rocksdb::IOStatus LockFile(const std::string& f, const rocksdb::IOOptions& o,
                             rocksdb::FileLock** l, rocksdb::IODebugContext* d) override {
    return Restrict(f, target()->LockFile(f, o, l, d));
  }
  rocksdb::IOStatus NewLogger(const std::string& f, const rocksdb::IOOptions& o,
                              std::shared_ptr<rocksdb::Logger>* r,
                              rocksdb::IODebugContext* d) override {
    return Restrict(f, target()->NewLogger(f, o, r, d));
  }

 private:
  static rocksdb::IOStatus Restrict(const std::string& file, rocksdb::IOStatus s) {
    if (s.ok() && ::chmod(file.c_str(), 0600) != 0) {
      return rocksdb::IOStatus::IOError("chmod 0600 " + file, std::strerror(errno));
    }
    return s;
  }
};

}  // namespace

StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& dir, bool in_memory,
                                             std::shared_ptr<rocksdb::FileSystem> file_system) {
  std::unique_ptr<Store> store(new Store());
  rocksdb::Options options;
  options.create_if_missing = true;
  options.manual_wal_flush = false;
  DisableBackgroundRecovery(&options);  // Note [No background recovery]
  if (in_memory) {
    store->env_.reset(rocksdb::NewMemEnv(rocksdb::Env::Default()));
    options.env = store->env_.get();
  } else {
    // The store is the coordinator's alone: a directory only its user can enter, files only
    // its user can read (0700, 0600), created so before any record is written.
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return InternalError("creating store directory " + dir + ": " + ec.message());
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::replace, ec);
    if (ec) return InternalError("restricting store directory " + dir + ": " + ec.message());
    if (file_system == nullptr) file_system = rocksdb::FileSystem::Default();
    store->env_ = rocksdb::NewCompositeEnv(std::make_shared<OwnerOnlyFileSystem>(file_system));
    options.env = store->env_.get();
  }
  rocksdb::DB* db = nullptr;
  FB_RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(options, dir, &db), "opening store " + dir));
  store->db_.reset(db);

  std::string value;
  const rocksdb::Status got = db->Get(rocksdb::ReadOptions(), "meta", &value);
  if (got.IsNotFound()) {
    proto::StoreMeta meta;
    meta.set_magic(kMagic);
    meta.set_version(kVersion);
    rocksdb::WriteOptions sync;
    sync.sync = true;
    FB_RETURN_IF_ERROR(
        FromRocks(db->Put(sync, "meta", meta.SerializeAsString()), "writing store meta"));
  } else {
    FB_RETURN_IF_ERROR(FromRocks(got, "reading store meta"));
    proto::StoreMeta meta;
    if (!meta.ParseFromString(value) || meta.magic() != kMagic) {
      return DataLossError(dir + ": not a fullband coordinator store (bad meta record)");
    }
    if (meta.version() != kVersion) {
      return DataLossError(dir + ": store format version " + std::to_string(meta.version()) +
                           ", this coordinator reads version " + std::to_string(kVersion));
    }
  }
  store->committer_ = std::thread([s = store.get()] { s->CommitLoop(); });
  return store;
}

Store::~Store() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (committer_.joinable()) committer_.join();
  db_.reset();
}

Status Store::Scan(std::string_view prefix,
                   const std::function<Status(std::string_view, std::string_view)>& fn,
                   std::string_view from, size_t limit) {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  const std::string_view start = from > prefix ? from : prefix;
  for (it->Seek(rocksdb::Slice(start.data(), start.size())); it->Valid() && limit > 0;
       it->Next(), --limit) {
    const rocksdb::Slice key = it->key();
    if (!key.starts_with(rocksdb::Slice(prefix.data(), prefix.size()))) break;
    FB_RETURN_IF_ERROR(fn(std::string_view(key.data(), key.size()),
                          std::string_view(it->value().data(), it->value().size())));
  }
  return FromRocks(it->status(), "scanning the store");
}

uint64_t Store::Append(WriteSet writes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (writes.empty()) return appended_;
  const uint64_t seq = ++appended_;
  queue_.emplace_back(seq, std::move(writes));
  wake_.notify_one();
  return seq;
}

uint64_t Store::LastAppended() const {
  std::lock_guard<std::mutex> lock(mu_);
  return appended_;
}

void Store::WhenDurable(uint64_t seq, std::function<void(const Status&)> done) {
  Status now;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.ok()) {
      now = failed_;
    } else if (seq > durable_) {
      waiters_.emplace_back(seq, std::move(done));
      return;
    }
  }
  done(now);
}

Status Store::WaitDurable(uint64_t seq) {
  std::mutex m;
  std::condition_variable cv;
  bool answered = false;
  Status result;
  WhenDurable(seq, [&](const Status& s) {
    std::lock_guard<std::mutex> lock(m);
    result = s;
    answered = true;
    cv.notify_one();
  });
  std::unique_lock<std::mutex> lock(m);
  cv.wait(lock, [&] { return answered; });
  return result;
}

Store::Stats Store::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Store::CommitLoop() {
  rocksdb::WriteOptions sync;
  sync.sync = true;
  for (;;) {
    std::deque<std::pair<uint64_t, WriteSet>> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty() && stop_) break;
      batch.swap(queue_);
    }
    rocksdb::WriteBatch write;
    for (const auto& [seq, set] : batch) {
      for (const auto& [key, value] : set.puts) write.Put(key, value);
      for (const std::string& key : set.deletes) write.Delete(key);
    }
    const rocksdb::Status s = db_->Write(sync, &write);
    std::vector<std::function<void(const Status&)>> ready;
    Status answer;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.synced_writes;
      stats_.batches += batch.size();
      if (!s.ok() && failed_.ok()) {
        failed_ = UnavailableError("coordinator store write failed: " + s.ToString());
        FB_LOG(ERROR) << failed_.message();
      }
      answer = failed_;
      if (failed_.ok()) durable_ = batch.back().first;
      auto keep = waiters_.begin();
      for (auto& w : waiters_) {
        if (!failed_.ok() || w.first <= durable_) {
          ready.push_back(std::move(w.second));
        } else {
          *keep++ = std::move(w);
        }
      }
      waiters_.erase(keep, waiters_.end());
    }
    for (auto& done : ready) done(answer);
  }
}

}  // namespace fullband::coordinator
