#include "checkpoint/sharded.h"

#include <fcntl.h>
#include <rocksdb/file_system.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "common/file_util.h"

namespace fullband::checkpoint {
namespace fs = std::filesystem;
namespace {

constexpr char kTempInfix[] = ".tmp-";
constexpr char kOldInfix[] = ".old-";

std::string RecordName(int rank) { return "rank-" + std::to_string(rank) + ".json"; }

// The stored shape of a piece: the box when the piece is all of it, else flat.
std::vector<int64_t> StoredShape(const TensorSlice& s) {
  if (s.begin == 0 && s.end == NumElements(s.shape)) return s.shape;
  return {s.numel()};
}

}  // namespace

int64_t ParseStepDirName(const std::string& name) {
  if (!name.starts_with("step-") || name.size() == 5 || name.size() > 24) return -1;
  int64_t n = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    n = n * 10 + (name[i] - '0');
  }
  return n;
}

namespace {

// ".step-<N>.tmp-<token>" or ".step-<N>.old-<token>" → N, or -1.
int64_t ParseHiddenDir(const std::string& name) {
  if (!name.starts_with(".")) return -1;
  const size_t dot = name.find('.', 1);
  if (dot == std::string::npos) return -1;
  const std::string rest = name.substr(dot);
  if (!rest.starts_with(kTempInfix) && !rest.starts_with(kOldInfix)) return -1;
  return ParseStepDirName(name.substr(1, dot - 1));
}

// Contiguous runs of a slice in the global tensor's row-major order: element `local` of the
// slice (counted from slice.begin) onward `len` elements sit at global index `global` onward.
struct Run {
  int64_t global, local, len;
};

std::vector<Run> Runs(const std::vector<int64_t>& global_shape, const TensorSlice& s) {
  std::vector<Run> runs;
  if (s.numel() <= 0) return runs;
  if (global_shape.empty()) return {{0, 0, 1}};
  const size_t rank = global_shape.size();
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank - 1; d > 0; --d) stride[d - 1] = stride[d] * global_shape[d];
  const int64_t width = s.shape.back();
  for (int64_t row = s.begin / width; row * width < s.end; ++row) {
    const int64_t lo = std::max(s.begin, row * width), hi = std::min(s.end, (row + 1) * width);
    int64_t g = s.offset.back() + (lo - row * width), rem = row;
    for (size_t d = rank - 1; d > 0; --d) {
      g += (s.offset[d - 1] + rem % s.shape[d - 1]) * stride[d - 1];
      rem /= s.shape[d - 1];
    }
    const int64_t local = lo - s.begin;
    if (!runs.empty() && runs.back().global + runs.back().len == g &&
        runs.back().local + runs.back().len == local) {
      runs.back().len += hi - lo;
    } else {
      runs.push_back({g, local, hi - lo});
    }
  }
  return runs;
}

// Copies what `have` (the runs of `data`) holds of `want` (the runs of `out`); returns the
// number of elements copied. Both are in increasing global order.
int64_t CopyOverlap(const std::vector<Run>& want, float* out, const std::vector<Run>& have,
                    const float* data) {
  int64_t copied = 0;
  for (size_t i = 0, j = 0; i < want.size() && j < have.size();) {
    const Run& a = want[i];
    const Run& b = have[j];
    const int64_t lo = std::max(a.global, b.global);
    const int64_t hi = std::min(a.global + a.len, b.global + b.len);
    if (lo < hi) {
      std::memcpy(out + a.local + (lo - a.global), data + b.local + (lo - b.global),
                  static_cast<size_t>(hi - lo) * sizeof(float));
      copied += hi - lo;
    }
    if (a.global + a.len < b.global + b.len) {
      ++i;
    } else {
      ++j;
    }
  }
  return copied;
}

Status ReadAt(int fd, void* buf, size_t bytes, uint64_t at, const std::string& path) {
  char* p = static_cast<char*>(buf);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return InternalError("cannot read " + path + ": " + std::strerror(errno));
    if (n == 0) return DataLossError(path + ": ends early (truncated)");
    p += n;
    at += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
  return OkStatus();
}

// Every tensor of `m` is covered exactly once by the pieces (they never overlap by construction
// of the layouts, so counting elements suffices).
Status CheckCoverage(const Manifest& m, const std::string& where) {
  std::map<std::string, int64_t> covered;
  for (const ShardFile& f : m.files) {
    for (const ShardPiece& p : f.pieces) covered[p.tensor] += p.slice.numel();
  }
  for (const auto& [name, t] : m.tensors) {
    if (covered[name] != NumElements(t.shape)) {
      return DataLossError(where + ": tensor " + name + " has " + std::to_string(covered[name]) +
                           " elements in the shards, not " + std::to_string(NumElements(t.shape)));
    }
  }
  return OkStatus();
}

uint64_t DirectoryBytes(const fs::path& dir) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) bytes += e.file_size(ec);
  }
  return bytes;
}

}  // namespace

std::string StepDirName(int64_t step) { return "step-" + std::to_string(step); }

std::string ShardFileName(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank-%05d.safetensors", rank);
  return buf;
}

std::string TempDirName(int64_t step, const std::string& token) {
  return "." + StepDirName(step) + kTempInfix + token;
}

TensorSlice WholeTensor(const std::vector<int64_t>& shape) {
  TensorSlice s;
  s.offset.assign(shape.size(), 0);
  s.shape = shape;
  s.end = NumElements(shape);
  return s;
}

StatusOr<ShardFile> WriteShard(const std::string& temp_dir, int rank,
                               const std::vector<PieceRef>& pieces,
                               rocksdb::FileSystem* file_system) {
  FB_RETURN_IF_ERROR(CreateDirectoriesDurably(temp_dir, file_system));
  std::vector<StTensorRef> refs;
  for (const PieceRef& p : pieces) {
    refs.push_back({p.tensor, StDType::kF32, StoredShape(p.slice), p.data});
  }
  ShardFile record;
  record.file = ShardFileName(rank);
  record.rank = rank;
  StWritten written;
  FB_RETURN_IF_ERROR(WriteSafetensors(temp_dir + "/" + record.file, refs,
                                      {{"format", "pt"}, {"producer", "fullband"}}, &written,
                                      file_system));
  record.bytes = written.bytes;
  record.xxh64 = written.xxh64;
  record.header_bytes = written.header_bytes;
  record.header_xxh64 = written.header_xxh64;
  for (size_t i = 0; i < pieces.size(); ++i) {
    record.pieces.push_back({pieces[i].tensor, pieces[i].slice, written.tensor_xxh64[i]});
  }
  FB_RETURN_IF_ERROR(
      WriteFileDurably(temp_dir + "/" + RecordName(rank), ShardFileToJson(record), file_system));
  return record;
}

StatusOr<std::string> CommitShards(const std::string& root, const std::string& temp_dir, int ranks,
                                   const TrainingState& state,
                                   const std::map<std::string, GlobalTensor>& tensors,
                                   rocksdb::FileSystem* file_system) {
  if (file_system == nullptr) file_system = rocksdb::FileSystem::Default().get();
  Manifest m;
  m.state = state;
  m.tensors = tensors;
  for (int r = 0; r < ranks; ++r) {
    const std::string path = temp_dir + "/" + RecordName(r);
    StatusOr<std::string> text = ReadFileToString(path);
    if (!text.ok())
      return DataLossError("checkpoint: rank " + std::to_string(r) +
                           "'s shard record: " + text.status().message());
    FB_ASSIGN_OR_RETURN(ShardFile f, ParseShardFile(*text, path));
    m.files.push_back(std::move(f));
  }
  // What a reader will check of the result, checked before it is committed.
  const std::string json = m.ToJson();
  FB_RETURN_IF_ERROR(Manifest::Parse(json, temp_dir + "/" + kManifestName).status());
  FB_RETURN_IF_ERROR(CheckCoverage(m, temp_dir));
  FB_RETURN_IF_ERROR(WriteFileDurably(temp_dir + "/" + kManifestName, json, file_system));
  const rocksdb::IOOptions io;
  for (int r = 0; r < ranks; ++r) {
    file_system->DeleteFile(temp_dir + "/" + RecordName(r), io, nullptr).PermitUncheckedError();
  }
  FB_RETURN_IF_ERROR(FsyncDirectory(temp_dir, file_system));

  const std::string target = root + "/" + StepDirName(state.step);
  if (file_system->FileExists(target, io, nullptr).ok()) {
    // An uncommitted leftover of an earlier attempt: same content.
    const std::string old =
        root + "/." + StepDirName(state.step) + kOldInfix + std::to_string(::getpid());
    const rocksdb::IOStatus moved = file_system->RenameFile(target, old, io, nullptr);
    if (!moved.ok()) return InternalError("cannot move aside " + target + ": " + moved.ToString());
    std::error_code ec;
    fs::remove_all(old, ec);
  }
  const rocksdb::IOStatus renamed = file_system->RenameFile(temp_dir, target, io, nullptr);
  if (!renamed.ok()) {
    return InternalError("cannot rename " + temp_dir + " to " + target + ": " + renamed.ToString());
  }
  FB_RETURN_IF_ERROR(FsyncDirectory(root, file_system));
  return target;
}

StatusOr<std::vector<CheckpointEntry>> ListCheckpoints(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return NotFoundError("no checkpoint directory " + root);
  std::vector<CheckpointEntry> out;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    if (!e.is_directory(ec)) continue;
    const std::string name = e.path().filename().string();
    CheckpointEntry c;
    c.path = e.path().string();
    c.step = ParseStepDirName(name);
    if (c.step < 0) {
      c.step = ParseHiddenDir(name);
      if (c.step < 0) continue;
      c.problem = "temporary: never committed";
    } else {
      StatusOr<std::unique_ptr<CheckpointReader>> r = CheckpointReader::Open(c.path);
      if (r.ok()) {
        const TrainingState& s = (*r)->manifest().state;
        c.complete = s.step == c.step;
        c.problem = c.complete ? "" : "its manifest is of step " + std::to_string(s.step);
        c.tp = s.tp;
        c.dp = s.dp;
        c.zero1 = s.zero1;
      } else {
        c.problem = r.status().message();
      }
    }
    c.bytes = DirectoryBytes(e.path());
    out.push_back(std::move(c));
  }
  if (ec) return InternalError("cannot list " + root + ": " + ec.message());
  std::sort(out.begin(), out.end(), [](const CheckpointEntry& a, const CheckpointEntry& b) {
    return a.step != b.step ? a.step < b.step : a.path < b.path;
  });
  return out;
}

Status PruneCheckpoints(const std::string& root, int64_t committed_step, int64_t keep,
                        const std::string& token) {
  FB_ASSIGN_OR_RETURN(std::vector<CheckpointEntry> all, ListCheckpoints(root));
  int64_t kept = 0;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    bool remove = false;
    if (!it->complete) {
      remove = token.empty() || !it->path.ends_with(kTempInfix + token);
    } else if (it->step > committed_step) {
      remove = true;
    } else {
      remove = keep > 0 && kept >= keep;
      ++kept;
    }
    if (!remove) continue;
    std::error_code ec;
    fs::remove_all(it->path, ec);
    if (ec) return InternalError("cannot remove " + it->path + ": " + ec.message());
  }
  return FsyncDirectory(root);
}

// A shard file being read: its descriptor and its header, checked against the manifest.
struct CheckpointReader::OpenFile {
  int fd = -1;
  std::string path;
  SafetensorsFile header;
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
};

CheckpointReader::~CheckpointReader() = default;

StatusOr<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFoundError("no checkpoint directory " + dir);
  const std::string path = dir + "/" + kManifestName;
  FB_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  std::unique_ptr<CheckpointReader> r(new CheckpointReader);
  r->dir_ = dir;
  FB_ASSIGN_OR_RETURN(r->manifest_, Manifest::Parse(text, path));
  FB_RETURN_IF_ERROR(CheckCoverage(r->manifest_, path));
  for (size_t i = 0; i < r->manifest_.files.size(); ++i) {
    const ShardFile& f = r->manifest_.files[i];
    const std::string file = dir + "/" + f.file;
    struct stat st;
    if (::stat(file.c_str(), &st) != 0) {
      return DataLossError("checkpoint " + dir + ": shard file " + f.file + " is missing");
    }
    if (static_cast<uint64_t>(st.st_size) != f.bytes) {
      return DataLossError("checkpoint " + dir + ": shard file " + f.file + " is " +
                           std::to_string(st.st_size) + " bytes, the manifest says " +
                           std::to_string(f.bytes) +
                           (static_cast<uint64_t>(st.st_size) < f.bytes ? " (truncated)" : ""));
    }
    for (size_t p = 0; p < f.pieces.size(); ++p) r->pieces_[f.pieces[p].tensor].push_back({i, p});
  }
  r->files_.resize(r->manifest_.files.size());
  return r;
}

StatusOr<CheckpointReader::OpenFile*> CheckpointReader::File(size_t index) {
  if (files_[index] != nullptr) return files_[index].get();
  const ShardFile& f = manifest_.files[index];
  auto of = std::make_unique<OpenFile>();
  of->path = dir_ + "/" + f.file;
  of->fd = ::open(of->path.c_str(), O_RDONLY | O_CLOEXEC);
  if (of->fd < 0)
    return DataLossError("cannot open shard " + of->path + ": " + std::strerror(errno));
  if (f.header_bytes < 8 || f.header_bytes > f.bytes) {
    return DataLossError(of->path + ": the manifest's header size is outside the file");
  }
  std::vector<uint8_t> head(f.header_bytes);
  FB_RETURN_IF_ERROR(ReadAt(of->fd, head.data(), head.size(), 0, of->path));
  if (XXH64(head.data(), head.size(), 0) != f.header_xxh64) {
    return DataLossError(of->path + ": header does not match its xxh64 in the manifest (corrupt)");
  }
  FB_ASSIGN_OR_RETURN(of->header,
                      SafetensorsFile::ParseHeader(of->path, head.data(), head.size(), f.bytes));
  for (const ShardPiece& p : f.pieces) {
    FB_ASSIGN_OR_RETURN(const SafetensorsFile::Entry* e, of->header.Find(p.tensor, StDType::kF32));
    if (e->numel() != p.slice.numel() || e->shape != StoredShape(p.slice)) {
      return DataLossError(of->path + ": tensor " + p.tensor + " has shape " +
                           ShapeString(e->shape) + ", the manifest's piece " +
                           ShapeString(StoredShape(p.slice)));
    }
  }
  files_[index] = std::move(of);
  return files_[index].get();
}

Status CheckpointReader::ReadPiece(size_t file, size_t piece, std::vector<float>* out) {
  FB_ASSIGN_OR_RETURN(OpenFile * f, File(file));
  const ShardPiece& p = manifest_.files[file].pieces[piece];
  const SafetensorsFile::Entry& e = f->header.entries().at(p.tensor);
  out->resize(static_cast<size_t>(p.slice.numel()));
  FB_RETURN_IF_ERROR(
      ReadAt(f->fd, out->data(), e.bytes, f->header.data_start() + e.offset, f->path));
  if (XXH64(out->data(), e.bytes, 0) != p.xxh64) {
    return DataLossError(f->path + ": tensor " + p.tensor +
                         " does not match its xxh64 in the manifest (corrupt)");
  }
  return OkStatus();
}

Status CheckpointReader::Read(const std::string& name, const TensorSlice& want, float* out) {
  auto t = manifest_.tensors.find(name);
  if (t == manifest_.tensors.end()) {
    return NotFoundError("checkpoint " + dir_ + " has no tensor " + name);
  }
  const GlobalTensor& g = t->second;
  if (g.dtype != StDType::kF32) {
    return InvalidArgumentError("checkpoint " + dir_ + ": tensor " + name + " is " +
                                StDTypeName(g.dtype) + ", not F32");
  }
  bool inside = want.shape.size() == g.shape.size() && want.offset.size() == g.shape.size() &&
                0 <= want.begin && want.begin <= want.end && want.end <= NumElements(want.shape);
  for (size_t d = 0; inside && d < g.shape.size(); ++d) {
    inside = want.offset[d] >= 0 && want.offset[d] + want.shape[d] <= g.shape[d];
  }
  if (!inside) {
    return InvalidArgumentError("checkpoint " + dir_ + ": a slice outside tensor " + name + " " +
                                ShapeString(g.shape));
  }
  const std::vector<Run> want_runs = Runs(g.shape, want);
  if (want_runs.empty()) return OkStatus();
  const int64_t lo = want_runs.front().global;
  const int64_t hi = want_runs.back().global + want_runs.back().len;
  int64_t copied = 0;
  std::vector<float> buf;
  for (const auto& [file, piece] : pieces_[name]) {
    const std::vector<Run> have = Runs(g.shape, manifest_.files[file].pieces[piece].slice);
    if (have.empty() || have.back().global + have.back().len <= lo || have.front().global >= hi) {
      continue;  // holds none of `want`
    }
    FB_RETURN_IF_ERROR(ReadPiece(file, piece, &buf));
    copied += CopyOverlap(want_runs, out, have, buf.data());
  }
  if (copied != want.numel()) {
    return DataLossError("checkpoint " + dir_ + ": tensor " + name + ": " +
                         std::to_string(want.numel() - copied) +
                         " of the wanted elements are in no shard");
  }
  return OkStatus();
}

Status CheckpointReader::VerifyFiles() {
  std::vector<char> buf(size_t{1} << 20);
  for (size_t i = 0; i < manifest_.files.size(); ++i) {
    FB_ASSIGN_OR_RETURN(OpenFile * f, File(i));
    XXH64_state_t* h = XXH64_createState();
    XXH64_reset(h, 0);
    Status s;
    for (uint64_t at = 0; at < manifest_.files[i].bytes && s.ok();) {
      const size_t n =
          static_cast<size_t>(std::min<uint64_t>(buf.size(), manifest_.files[i].bytes - at));
      s = ReadAt(f->fd, buf.data(), n, at, f->path);
      XXH64_update(h, buf.data(), n);
      at += n;
    }
    const uint64_t digest = XXH64_digest(h);
    XXH64_freeState(h);
    FB_RETURN_IF_ERROR(s);
    if (digest != manifest_.files[i].xxh64) {
      return DataLossError(f->path + ": does not match its xxh64 in the manifest (corrupt)");
    }
    std::vector<float> piece;
    for (size_t p = 0; p < manifest_.files[i].pieces.size(); ++p) {
      FB_RETURN_IF_ERROR(ReadPiece(i, p, &piece));
    }
  }
  return OkStatus();
}

}  // namespace fullband::checkpoint
