// Whole files and durable writes: reading a file into a string, writing one so that a crash
// leaves either the old content or the new (temporary file, fsync, rename, fsync of the
// directory), creating directories whose names survive a crash, and fsync of a directory after
// entries in it changed.
//
// Every write goes through a rocksdb::FileSystem: the POSIX one unless the caller passes
// another. Tests pass one that simulates a power loss or a full disk
// (tests/common/fault_file_system.h), so the durability of whatever is written through these
// functions is tested the way the coordinator's and the token store's RocksDB databases are.
//
// Errors name the path: NOT_FOUND for a file to read that is missing, INTERNAL with the system's
// reason for the rest (a full disk, a read-only or missing directory).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"

namespace rocksdb {
class FileSystem;
class FSWritableFile;
struct DBOptions;
}  // namespace rocksdb

namespace fullband {

StatusOr<std::string> ReadFileToString(const std::string& path);

// A file's new content, written to a temporary file beside it and made the file's content by
// Commit. Destroyed uncommitted, it removes the temporary file and leaves the old content.
class DurableFile {
 public:
  // INTERNAL naming the temporary file when it cannot be created. `fs` null: the POSIX one.
  static StatusOr<std::unique_ptr<DurableFile>> Create(const std::string& path,
                                                       rocksdb::FileSystem* fs = nullptr);
  ~DurableFile();
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;

  Status Append(const void* data, size_t bytes);
  // Syncs the temporary file, renames it to the path and syncs the directory: when this returns
  // OK, the new content is what a crash leaves.
  Status Commit();

 private:
  DurableFile(std::string path, rocksdb::FileSystem* fs);

  std::string path_, temp_;
  rocksdb::FileSystem* fs_;
  std::unique_ptr<rocksdb::FSWritableFile> file_;
  bool committed_ = false;
};

// `path`'s new content, durable when this returns OK.
Status WriteFileDurably(const std::string& path, const std::string& content,
                        rocksdb::FileSystem* fs = nullptr);

// Makes the directory's entries (creations, renames, removals) durable.
Status FsyncDirectory(const std::string& path, rocksdb::FileSystem* fs = nullptr);

// Creates `path` and any missing parents, each made durable by a sync of its parent.
Status CreateDirectoriesDurably(const std::string& path, rocksdb::FileSystem* fs = nullptr);

// Note [No background recovery]: a write error stops a fullband database until it is reopened.
// RocksDB would otherwise recover on its own: after ENOSPC its file manager polls for free space
// and resumes the database from a background thread, and a retryable error is retried. Every
// fullband writer already fails for good on its first error (the coordinator's store answers
// UNAVAILABLE from then on; an ingest fails, and the next one goes on from its last commit), so
// such a recovery would only race the writer's Close, and RocksDB 7.8's resume after a failed
// MANIFEST write can abort the process on its own assertion.
void DisableBackgroundRecovery(rocksdb::DBOptions* options);

// The directory part of `path` ("." when it has none).
std::string ParentDirectory(const std::string& path);

}  // namespace fullband
