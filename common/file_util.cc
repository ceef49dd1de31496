#include "common/file_util.h"

#include <fcntl.h>
#include <rocksdb/file_system.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace fullband {
namespace {

Status Errno(const std::string& what, const std::string& path) {
  const int e = errno;
  const std::string message = what + " " + path + ": " + std::strerror(e);
  return e == ENOENT ? NotFoundError(message) : InternalError(message);
}

Status Io(const rocksdb::IOStatus& s, const std::string& what, const std::string& path) {
  if (s.ok()) return OkStatus();
  return InternalError(what + " " + path + ": " + s.ToString());
}

rocksdb::FileSystem* OrDefault(rocksdb::FileSystem* fs) {
  return fs != nullptr ? fs : rocksdb::FileSystem::Default().get();
}

// Turns down every recovery RocksDB offers to start (Note [No background recovery]).
class NoRecovery final : public rocksdb::EventListener {
 public:
  const char* Name() const override { return "FullbandNoBackgroundRecovery"; }
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason, rocksdb::Status status,
                            bool* auto_recovery) override {
    status.PermitUncheckedError();
    *auto_recovery = false;
  }
};

}  // namespace

StatusOr<std::string> ReadFileToString(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", path);
  std::string out;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const Status s = Errno("cannot read", path);
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

DurableFile::DurableFile(std::string path, rocksdb::FileSystem* fs)
    : path_(std::move(path)), temp_(path_ + ".tmp." + std::to_string(::getpid())), fs_(fs) {}

StatusOr<std::unique_ptr<DurableFile>> DurableFile::Create(const std::string& path,
                                                           rocksdb::FileSystem* fs) {
  std::unique_ptr<DurableFile> f(new DurableFile(path, OrDefault(fs)));
  rocksdb::FileOptions options;
  options.use_mmap_writes = false;  // write(2): a full disk is an error, never a SIGBUS
  FB_RETURN_IF_ERROR(Io(f->fs_->NewWritableFile(f->temp_, options, &f->file_, nullptr),
                        "cannot create", f->temp_));
  return f;
}

DurableFile::~DurableFile() {
  if (committed_) return;
  if (file_ != nullptr) file_->Close(rocksdb::IOOptions(), nullptr).PermitUncheckedError();
  file_.reset();
  fs_->DeleteFile(temp_, rocksdb::IOOptions(), nullptr).PermitUncheckedError();
}

Status DurableFile::Append(const void* data, size_t bytes) {
  return Io(file_->Append(rocksdb::Slice(static_cast<const char*>(data), bytes),
                          rocksdb::IOOptions(), nullptr),
            "cannot write", temp_);
}

Status DurableFile::Commit() {
  const rocksdb::IOOptions io;
  FB_RETURN_IF_ERROR(Io(file_->Sync(io, nullptr), "cannot fsync", temp_));
  FB_RETURN_IF_ERROR(Io(file_->Close(io, nullptr), "cannot close", temp_));
  file_.reset();
  FB_RETURN_IF_ERROR(Io(fs_->RenameFile(temp_, path_, io, nullptr), "cannot rename to", path_));
  committed_ = true;
  return FsyncDirectory(ParentDirectory(path_), fs_);
}

Status WriteFileDurably(const std::string& path, const std::string& content,
                        rocksdb::FileSystem* fs) {
  FB_ASSIGN_OR_RETURN(std::unique_ptr<DurableFile> file, DurableFile::Create(path, fs));
  FB_RETURN_IF_ERROR(file->Append(content.data(), content.size()));
  return file->Commit();
}

Status FsyncDirectory(const std::string& path, rocksdb::FileSystem* fs) {
  std::unique_ptr<rocksdb::FSDirectory> dir;
  FB_RETURN_IF_ERROR(Io(OrDefault(fs)->NewDirectory(path, rocksdb::IOOptions(), &dir, nullptr),
                        "cannot open directory", path));
  return Io(dir->Fsync(rocksdb::IOOptions(), nullptr), "cannot fsync directory", path);
}

Status CreateDirectoriesDurably(const std::string& path, rocksdb::FileSystem* fs) {
  fs = OrDefault(fs);
  std::vector<std::string> missing;  // innermost first
  for (std::string p = path; !p.empty() && p != "/" && p != ".";) {
    bool is_dir = false;
    if (fs->IsDirectory(p, rocksdb::IOOptions(), &is_dir, nullptr).ok() && is_dir) break;
    missing.push_back(p);
    const std::string parent = ParentDirectory(p);
    if (parent == p) break;
    p = parent;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    FB_RETURN_IF_ERROR(Io(fs->CreateDirIfMissing(*it, rocksdb::IOOptions(), nullptr),
                          "cannot create directory", *it));
    FB_RETURN_IF_ERROR(FsyncDirectory(ParentDirectory(*it), fs));
  }
  return OkStatus();
}

void DisableBackgroundRecovery(rocksdb::DBOptions* options) {
  options->max_bgerror_resume_count = 0;                         // retryable errors
  options->listeners.push_back(std::make_shared<NoRecovery>());  // ENOSPC
}

std::string ParentDirectory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace fullband
