#include "tests/common/fault_file_system.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace fullband::testing {
namespace {

std::string DirectoryOf(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

std::string Normal(const std::string& path) {
  return std::filesystem::path(path).lexically_normal().string();
}

}  // namespace

class FaultFileSystem::File final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  File(std::unique_ptr<rocksdb::FSWritableFile> file, FaultFileSystem* fs, std::string name)
      : rocksdb::FSWritableFileOwnerWrapper(std::move(file)), fs_(fs), name_(std::move(name)) {}
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = fs_->Admit(name_);
    if (s.ok()) s = target()->Append(data, o, d);
    if (s.ok()) fs_->Wrote(name_, data.size());
    return s;
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           const rocksdb::DataVerificationInfo& /*info*/,
                           rocksdb::IODebugContext* d) override {
    return Append(data, o, d);
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = fs_->Admit(name_);
    // Flush moves the file's buffer (if any) to the system before the sync.
    if (s.ok()) s = target()->Flush(o, d);
    if (s.ok()) s = target()->Sync(o, d);
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

class FaultFileSystem::Directory final : public rocksdb::FSDirectoryWrapper {
 public:
  Directory(std::unique_ptr<rocksdb::FSDirectory> dir, FaultFileSystem* fs, std::string name)
      : rocksdb::FSDirectoryWrapper(std::move(dir)), fs_(fs), name_(std::move(name)) {}
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = fs_->Admit(name_);
    if (s.ok()) s = rocksdb::FSDirectoryWrapper::Fsync(o, d);
    if (s.ok()) fs_->SyncedDirectory(name_);
    return s;
  }
  rocksdb::IOStatus FsyncWithDirOptions(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d,
                                        const rocksdb::DirFsyncOptions& /*options*/) override {
    return Fsync(o, d);
  }

 private:
  FaultFileSystem* fs_;
  std::string name_;
};

void FaultFileSystem::FailAfter(int64_t n, Fault fault) {
  std::lock_guard<std::mutex> lock(mu_);
  budget_ = n;
  fault_ = fault;
}

void FaultFileSystem::ResumeWrites() {
  std::lock_guard<std::mutex> lock(mu_);
  budget_ = -1;
}

int64_t FaultFileSystem::operations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return operations_;
}

rocksdb::IOStatus FaultFileSystem::Admit(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (budget_ == 0) {
    return fault_ == Fault::kNoSpace
               ? rocksdb::IOStatus::NoSpace("injected: no space left on device", what)
               : rocksdb::IOStatus::IOError("injected: input/output error", what);
  }
  if (budget_ > 0) --budget_;
  ++operations_;
  return rocksdb::IOStatus::OK();
}

bool FaultFileSystem::Exists(const std::string& path) {
  return target()->FileExists(path, rocksdb::IOOptions(), nullptr).ok();
}

void FaultFileSystem::Created(const std::string& path, bool directory) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.push_back({Normal(path), "", directory, false, ""});
}

void FaultFileSystem::Wrote(const std::string& name, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  files_[Normal(name)].written += bytes;
}

void FaultFileSystem::Synced(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  Content& c = files_[Normal(name)];
  c.synced = c.written;
}

void FaultFileSystem::SyncedDirectory(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string d = Normal(dir);
  std::erase_if(entries_, [&](const Entry& e) { return DirectoryOf(e.path) == d; });
}

void FaultFileSystem::DropUnsynced() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, c] : files_) {
    if (c.written > c.synced) (void)::truncate(name.c_str(), static_cast<off_t>(c.synced));
  }
  files_.clear();
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    std::error_code ec;
    if (!it->from.empty()) {
      (void)std::rename(it->path.c_str(), it->from.c_str());
      if (it->replaces) std::ofstream(it->path, std::ios::binary) << it->replaced;
    } else if (it->directory) {
      std::filesystem::remove_all(it->path, ec);
    } else {
      std::filesystem::remove(it->path, ec);
    }
  }
  entries_.clear();
}

rocksdb::IOStatus FaultFileSystem::OpenWritable(const std::string& f, bool reopen,
                                                const rocksdb::FileOptions& o,
                                                std::unique_ptr<rocksdb::FSWritableFile>* r,
                                                rocksdb::IODebugContext* d) {
  if (rocksdb::IOStatus s = Admit(f); !s.ok()) return s;
  const bool existed = Exists(f);
  std::unique_ptr<rocksdb::FSWritableFile> file;
  rocksdb::IOStatus s = reopen ? target()->ReopenWritableFile(f, o, &file, d)
                               : target()->NewWritableFile(f, o, &file, d);
  if (!s.ok()) return s;
  if (!existed) Created(f, /*directory=*/false);
  uint64_t size = 0;
  if (reopen) (void)target()->GetFileSize(f, rocksdb::IOOptions(), &size, d);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Content& c = files_[Normal(f)];
    // A new file is empty (a crash may leave it so); a reopened one keeps what it held before
    // this file system wrote to it.
    if (!reopen || c.written < size) c = Content{size, size};
  }
  *r = std::make_unique<File>(std::move(file), this, f);
  return s;
}

rocksdb::IOStatus FaultFileSystem::NewWritableFile(const std::string& f,
                                                   const rocksdb::FileOptions& o,
                                                   std::unique_ptr<rocksdb::FSWritableFile>* r,
                                                   rocksdb::IODebugContext* d) {
  return OpenWritable(f, /*reopen=*/false, o, r, d);
}

rocksdb::IOStatus FaultFileSystem::ReopenWritableFile(const std::string& f,
                                                      const rocksdb::FileOptions& o,
                                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                                      rocksdb::IODebugContext* d) {
  return OpenWritable(f, /*reopen=*/true, o, r, d);
}

rocksdb::IOStatus FaultFileSystem::ReuseWritableFile(const std::string& f, const std::string& old,
                                                     const rocksdb::FileOptions& o,
                                                     std::unique_ptr<rocksdb::FSWritableFile>* r,
                                                     rocksdb::IODebugContext* d) {
  if (rocksdb::IOStatus s = RenameFile(old, f, rocksdb::IOOptions(), d); !s.ok()) return s;
  return NewWritableFile(f, o, r, d);
}

rocksdb::IOStatus FaultFileSystem::NewDirectory(const std::string& name,
                                                const rocksdb::IOOptions& o,
                                                std::unique_ptr<rocksdb::FSDirectory>* r,
                                                rocksdb::IODebugContext* d) {
  std::unique_ptr<rocksdb::FSDirectory> dir;
  rocksdb::IOStatus s = target()->NewDirectory(name, o, &dir, d);
  if (s.ok()) *r = std::make_unique<Directory>(std::move(dir), this, name);
  return s;
}

rocksdb::IOStatus FaultFileSystem::RenameFile(const std::string& from, const std::string& to,
                                              const rocksdb::IOOptions& o,
                                              rocksdb::IODebugContext* d) {
  if (rocksdb::IOStatus s = Admit(to); !s.ok()) return s;
  Entry entry{Normal(to), Normal(from), false, false, ""};
  if (std::filesystem::is_regular_file(to)) {  // kept, to be put back if the rename is undone
    std::ifstream in(to, std::ios::binary);
    entry.replaces = true;
    entry.replaced.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  rocksdb::IOStatus s = target()->RenameFile(from, to, o, d);
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  const std::string a = entry.from, b = entry.path;
  entries_.push_back(std::move(entry));
  // Files under a renamed directory keep their content state under their new names.
  std::map<std::string, Content> moved;
  for (auto it = files_.begin(); it != files_.end();) {
    if (it->first == a || it->first.starts_with(a + "/")) {
      moved[b + it->first.substr(a.size())] = it->second;
      it = files_.erase(it);
    } else {
      ++it;
    }
  }
  files_.merge(moved);
  for (Entry& e : entries_) {
    if (e.path.starts_with(a + "/")) e.path = b + e.path.substr(a.size());
  }
  return s;
}

rocksdb::IOStatus FaultFileSystem::LinkFile(const std::string& from, const std::string& to,
                                            const rocksdb::IOOptions& o,
                                            rocksdb::IODebugContext* d) {
  if (rocksdb::IOStatus s = Admit(to); !s.ok()) return s;
  rocksdb::IOStatus s = target()->LinkFile(from, to, o, d);
  if (s.ok()) Created(to, /*directory=*/false);
  return s;
}

rocksdb::IOStatus FaultFileSystem::DeleteFile(const std::string& f, const rocksdb::IOOptions& o,
                                              rocksdb::IODebugContext* d) {
  if (rocksdb::IOStatus s = Admit(f); !s.ok()) return s;
  rocksdb::IOStatus s = target()->DeleteFile(f, o, d);
  std::lock_guard<std::mutex> lock(mu_);
  files_.erase(Normal(f));
  return s;
}

rocksdb::IOStatus FaultFileSystem::CreateDir(const std::string& dir, const rocksdb::IOOptions& o,
                                             rocksdb::IODebugContext* d) {
  if (rocksdb::IOStatus s = Admit(dir); !s.ok()) return s;
  rocksdb::IOStatus s = target()->CreateDir(dir, o, d);
  if (s.ok()) Created(dir, /*directory=*/true);
  return s;
}

rocksdb::IOStatus FaultFileSystem::CreateDirIfMissing(const std::string& dir,
                                                      const rocksdb::IOOptions& o,
                                                      rocksdb::IODebugContext* d) {
  bool is_dir = false;
  if (target()->IsDirectory(dir, o, &is_dir, d).ok() && is_dir) return rocksdb::IOStatus::OK();
  return CreateDir(dir, o, d);
}

rocksdb::IOStatus FaultFileSystem::DeleteDir(const std::string& dir, const rocksdb::IOOptions& o,
                                             rocksdb::IODebugContext* d) {
  if (rocksdb::IOStatus s = Admit(dir); !s.ok()) return s;
  return target()->DeleteDir(dir, o, d);
}

}  // namespace fullband::testing
