// Safetensors files: the weight format of model init/grad, checkpoint shards and exports.
// Format (checkpoint/FORMAT.md): u64 little-endian header length N, N bytes of JSON mapping
// each tensor name to {dtype, shape, data_offsets}, optionally "__metadata__" (string map),
// then the raw little-endian tensor bytes. PyTorch's `safetensors` reads these files.
//
// Writing is atomic: a temporary file in the same directory, fsynced, then renamed over the
// target. Reading validates everything (header size, JSON, dtypes, shapes against offsets,
// offsets within the file and non-overlapping) and returns DATA_LOSS naming the file and the
// tensor on any inconsistency; a missing file is NOT_FOUND.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace rocksdb {
class FileSystem;
}  // namespace rocksdb

namespace fullband::checkpoint {

enum class StDType { kF32, kF64, kI32, kI64, kU8, kBF16, kF16 };

const char* StDTypeName(StDType dtype);  // "F32", ...
size_t StDTypeSize(StDType dtype);

// A tensor to write; `data` points to numel · size bytes owned by the caller.
struct StTensorRef {
  std::string name;
  StDType dtype = StDType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// What WriteSafetensors wrote: the file's size and XXH64 (seed 0) hashes of the whole file, of its
// header (the length word and the JSON) and of each tensor's bytes, in `tensors` order.
struct StWritten {
  uint64_t bytes = 0;
  uint64_t xxh64 = 0;
  uint64_t header_bytes = 0;  // 8 + N
  uint64_t header_xxh64 = 0;
  std::vector<uint64_t> tensor_xxh64;
};

// Writes `path` durably (common/file_util.h: a crash leaves the old file or the new one) through
// `fs` (null: the POSIX file system). `written` (optional) receives the hashes, computed from the
// bytes as they are written.
Status WriteSafetensors(const std::string& path, const std::vector<StTensorRef>& tensors,
                        const std::map<std::string, std::string>& metadata = {},
                        StWritten* written = nullptr, rocksdb::FileSystem* fs = nullptr);

// A file read into memory. Tensors keep the file's order of data offsets.
class SafetensorsFile {
 public:
  struct Entry {
    StDType dtype;
    std::vector<int64_t> shape;
    size_t offset;  // into data()
    size_t bytes;
    int64_t numel() const;
  };

  static StatusOr<SafetensorsFile> Read(const std::string& path);
  // The header only (data() is not available): for readers that fetch tensors with pread.
  // `file_bytes` is the file's size; the same checks as Read.
  static StatusOr<SafetensorsFile> ParseHeader(const std::string& path, const uint8_t* bytes,
                                               size_t size, uint64_t file_bytes);

  // Bytes from the start of the file to the first tensor byte (8 + header length).
  size_t data_start() const { return data_start_; }

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::map<std::string, Entry>& entries() const { return entries_; }
  bool Has(const std::string& name) const { return entries_.count(name) > 0; }
  // NOT_FOUND if absent; INVALID_ARGUMENT if its dtype (or shape) differs from the expected.
  StatusOr<const Entry*> Find(const std::string& name, StDType dtype) const;
  StatusOr<const Entry*> Find(const std::string& name, StDType dtype,
                              const std::vector<int64_t>& shape) const;
  const uint8_t* data(const Entry& e) const { return bytes_.data() + data_start_ + e.offset; }

 private:
  std::string path_;
  std::vector<uint8_t> bytes_;
  size_t data_start_ = 0;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, Entry> entries_;
};

std::string ShapeString(const std::vector<int64_t>& shape);  // "[2, 3]"

}  // namespace fullband::checkpoint
