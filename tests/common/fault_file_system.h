// FaultFileSystem: a RocksDB FileSystem for power-loss tests, after LevelDB's
// FaultInjectionTestEnv. Everything fullband writes durably goes through a rocksdb::FileSystem
// (the coordinator's store, token stores, common/file_util.h and so checkpoints), so one wrapper
// tests all of them.
//
// It models what a power loss keeps, unlike killing the process (which keeps the page cache):
//  - a file's content up to its last Sync; what was appended after is cut off;
//  - a directory entry (a created file, link or directory, a rename) only once its directory was
//    synced; newer entries are undone, newest first (a rename goes back, restoring the file it
//    replaced; a creation is removed).
// Removals are taken as durable at once: a removed file does not come back (the model errs on the
// side of losing data, never of keeping it).
//
// Faults: StopWrites makes every mutating operation fail (ENOSPC: the disk is full, or the power
// is gone; or EIO: the disk is failing); FailAfter(n) lets n more succeed first, so a test can cut
// the power after every operation of a protocol in turn. DropUnsynced then applies the model to the
// disk.
#pragma once

#include <rocksdb/file_system.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace fullband::testing {

class FaultFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  FaultFileSystem() : rocksdb::FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  static const char* kClassName() { return "FullbandFaultFileSystem"; }
  const char* Name() const override { return kClassName(); }

  // How a stopped write fails.
  enum class Fault { kNoSpace, kIoError };  // ENOSPC, EIO
  // From now on every mutating operation fails.
  void StopWrites(Fault fault = Fault::kNoSpace) { FailAfter(0, fault); }
  // `n` more mutating operations succeed; every one after fails.
  void FailAfter(int64_t n, Fault fault = Fault::kNoSpace);
  void ResumeWrites();
  // Mutating operations that succeeded so far (creations, appends, syncs, renames, links,
  // removals, directory syncs).
  int64_t operations() const;
  // The power loss: cuts every file back to its synced size and undoes every directory entry
  // not made durable by a sync of its directory. Call it with the writers closed.
  void DropUnsynced();

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                                      const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus NewDirectory(const std::string& name, const rocksdb::IOOptions& o,
                                 std::unique_ptr<rocksdb::FSDirectory>* r,
                                 rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus RenameFile(const std::string& from, const std::string& to,
                               const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus LinkFile(const std::string& from, const std::string& to,
                             const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus DeleteFile(const std::string& f, const rocksdb::IOOptions& o,
                               rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus CreateDir(const std::string& dir, const rocksdb::IOOptions& o,
                              rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus CreateDirIfMissing(const std::string& dir, const rocksdb::IOOptions& o,
                                       rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus DeleteDir(const std::string& dir, const rocksdb::IOOptions& o,
                              rocksdb::IODebugContext* d) override;

 private:
  class File;
  class Directory;
  struct Content {
    uint64_t written = 0, synced = 0;
  };
  // A directory entry not yet durable: `path` created (`from` empty) or renamed from `from`,
  // replacing a file that held `replaced` when `replaces`.
  struct Entry {
    std::string path, from;
    bool directory = false;
    bool replaces = false;
    std::string replaced;
  };

  rocksdb::IOStatus OpenWritable(const std::string& f, bool reopen, const rocksdb::FileOptions& o,
                                 std::unique_ptr<rocksdb::FSWritableFile>* r,
                                 rocksdb::IODebugContext* d);
  // Counts one mutating operation, or fails it when the writes have stopped.
  rocksdb::IOStatus Admit(const std::string& what);
  bool Exists(const std::string& path);
  void Created(const std::string& path, bool directory);
  void Wrote(const std::string& name, size_t bytes);
  void Synced(const std::string& name);
  void SyncedDirectory(const std::string& dir);

  mutable std::mutex mu_;
  std::map<std::string, Content> files_;  // written through this file system, by current name
  std::vector<Entry> entries_;            // oldest first
  int64_t operations_ = 0;
  int64_t budget_ = -1;  // operations left before the writes stop; -1: unlimited
  Fault fault_ = Fault::kNoSpace;
};

}  // namespace fullband::testing
