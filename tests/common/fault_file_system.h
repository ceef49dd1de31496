// FaultFileSystem: a RocksDB FileSystem for power-loss tests, after LevelDB's
// FaultInjectionTestEnv. It remembers how much of every file it wrote had been synced; a
// simulated power loss (StopWrites, close the database, DropUnsynced) cuts every file back to
// that, keeping only what had reached the disk — unlike killing the process, which keeps the
// page cache. It can also fail every write with ENOSPC.
#pragma once

#include <rocksdb/file_system.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace fullband::testing {

class FaultFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  FaultFileSystem() : rocksdb::FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  static const char* kClassName() { return "FullbandFaultFileSystem"; }
  const char* Name() const override { return kClassName(); }

  // From now on every write fails (with ENOSPC): the power is gone, or the disk is full.
  void StopWrites() {
    std::lock_guard<std::mutex> lock(mu_);
    failing_ = true;
  }
  void ResumeWrites() {
    std::lock_guard<std::mutex> lock(mu_);
    failing_ = false;
  }
  // Cuts every file written through this file system back to its last synced size.
  void DropUnsynced() {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, state] : files_) {
      if (state.written > state.synced) (void)::truncate(name.c_str(), state.synced);
    }
    files_.clear();
  }

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* d) override {
    if (Failing()) return rocksdb::IOStatus::NoSpace("injected: no space left", f);
    std::unique_ptr<rocksdb::FSWritableFile> file;
    rocksdb::IOStatus s = target()->NewWritableFile(f, o, &file, d);
    if (!s.ok()) return s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      files_[f] = State();
    }
    *r = std::make_unique<File>(std::move(file), this, f);
    return s;
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* d) override {
    if (Failing()) return rocksdb::IOStatus::NoSpace("injected: no space left", f);
    std::unique_ptr<rocksdb::FSWritableFile> file;
    rocksdb::IOStatus s = target()->ReopenWritableFile(f, o, &file, d);
    if (!s.ok()) return s;
    uint64_t size = 0;
    (void)target()->GetFileSize(f, rocksdb::IOOptions(), &size, d);
    {
      std::lock_guard<std::mutex> lock(mu_);
      files_[f] = State{size, size};
    }
    *r = std::make_unique<File>(std::move(file), this, f);
    return s;
  }
  rocksdb::IOStatus RenameFile(const std::string& from, const std::string& to,
                               const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = target()->RenameFile(from, to, o, d);
    std::lock_guard<std::mutex> lock(mu_);
    if (s.ok() && files_.count(from)) {
      files_[to] = files_[from];
      files_.erase(from);
    }
    return s;
  }
  rocksdb::IOStatus DeleteFile(const std::string& f, const rocksdb::IOOptions& o,
                               rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = target()->DeleteFile(f, o, d);
    std::lock_guard<std::mutex> lock(mu_);
    files_.erase(f);
    return s;
  }

 private:
  struct State {
    uint64_t written = 0, synced = 0;
  };

  class File final : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> file, FaultFileSystem* fs, std::string name)
        : rocksdb::FSWritableFileOwnerWrapper(std::move(file)), fs_(fs), name_(std::move(name)) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* d) override {
      if (fs_->Failing()) return rocksdb::IOStatus::NoSpace("injected: no space left", name_);
      rocksdb::IOStatus s = target()->Append(data, o, d);
      if (s.ok()) fs_->Wrote(name_, data.size());
      return s;
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             const rocksdb::DataVerificationInfo& /*info*/,
                             rocksdb::IODebugContext* d) override {
      return Append(data, o, d);
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
      if (fs_->Failing()) return rocksdb::IOStatus::NoSpace("injected: no space left", name_);
      rocksdb::IOStatus s = target()->Sync(o, d);
      if (s.ok()) fs_->Synced(name_);
      return s;
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
      return Sync(o, d);
    }

   private:
    FaultFileSystem* fs_;
    std::string name_;
  };

  bool Failing() {
    std::lock_guard<std::mutex> lock(mu_);
    return failing_;
  }
  void Wrote(const std::string& name, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    files_[name].written += bytes;
  }
  void Synced(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    State& s = files_[name];
    s.synced = s.written;
  }

  std::mutex mu_;
  std::map<std::string, State> files_;
  bool failing_ = false;
};

}  // namespace fullband::testing
