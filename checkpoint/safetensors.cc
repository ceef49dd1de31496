#include "checkpoint/safetensors.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/file_util.h"

namespace fullband::checkpoint {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit is 100 MB

bool ParseDType(const std::string& s, StDType* out) {
  static const std::pair<const char*, StDType> kNames[] = {
      {"F32", StDType::kF32}, {"F64", StDType::kF64}, {"I32", StDType::kI32},
      {"I64", StDType::kI64}, {"U8", StDType::kU8},   {"BF16", StDType::kBF16},
      {"F16", StDType::kF16}};
  for (const auto& [name, dtype] : kNames) {
    if (s == name) {
      *out = dtype;
      return true;
    }
  }
  return false;
}

}  // namespace

const char* StDTypeName(StDType dtype) {
  switch (dtype) {
    case StDType::kF32:
      return "F32";
    case StDType::kF64:
      return "F64";
    case StDType::kI32:
      return "I32";
    case StDType::kI64:
      return "I64";
    case StDType::kU8:
      return "U8";
    case StDType::kBF16:
      return "BF16";
    case StDType::kF16:
      return "F16";
  }
  return "?";
}

size_t StDTypeSize(StDType dtype) {
  switch (dtype) {
    case StDType::kF64:
    case StDType::kI64:
      return 8;
    case StDType::kF32:
    case StDType::kI32:
      return 4;
    case StDType::kBF16:
    case StDType::kF16:
      return 2;
    case StDType::kU8:
      return 1;
  }
  return 0;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t SafetensorsFile::Entry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Status WriteSafetensors(const std::string& path, const std::vector<StTensorRef>& tensors,
                        const std::map<std::string, std::string>& metadata, StWritten* written,
                        rocksdb::FileSystem* fs) {
  Json header = Json::object();
  size_t offset = 0;
  std::vector<size_t> sizes;
  for (const StTensorRef& t : tensors) {
    if (header.contains(t.name) || t.name == "__metadata__") {
      return InvalidArgumentError("safetensors " + path + ": duplicate or reserved tensor name " +
                                  t.name);
    }
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    sizes.push_back(static_cast<size_t>(numel) * StDTypeSize(t.dtype));
    header[t.name] = {{"dtype", StDTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + sizes.back()}}};
    offset += sizes.back();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  const uint64_t header_len = text.size();
  std::string head(8, '\0');  // the length word, then the header
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>(header_len >> (8 * i));
  head += text;

  // The hashes, when asked for, are computed from the bytes as they go out.
  std::unique_ptr<XXH64_state_t, XXH_errorcode (*)(XXH64_state_t*)> file_state(nullptr,
                                                                               XXH64_freeState);
  if (written != nullptr) {
    *written = StWritten();
    written->header_bytes = head.size();
    written->header_xxh64 = XXH64(head.data(), head.size(), 0);
    file_state.reset(XXH64_createState());
    XXH64_reset(file_state.get(), 0);
  }
  FB_ASSIGN_OR_RETURN(std::unique_ptr<DurableFile> file, DurableFile::Create(path, fs));
  const auto write = [&](const void* data, size_t bytes) {
    if (file_state != nullptr) XXH64_update(file_state.get(), data, bytes);
    return file->Append(data, bytes);
  };
  FB_RETURN_IF_ERROR(write(head.data(), head.size()));
  uint64_t bytes = head.size();
  for (size_t i = 0; i < tensors.size(); ++i) {
    FB_RETURN_IF_ERROR(write(tensors[i].data, sizes[i]));
    if (written != nullptr) written->tensor_xxh64.push_back(XXH64(tensors[i].data, sizes[i], 0));
    bytes += sizes[i];
  }
  FB_RETURN_IF_ERROR(file->Commit());
  if (written != nullptr) {
    written->bytes = bytes;
    written->xxh64 = XXH64_digest(file_state.get());
  }
  return OkStatus();
}

StatusOr<SafetensorsFile> SafetensorsFile::Read(const std::string& path) {
  std::vector<uint8_t> bytes;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) return NotFoundError("cannot open safetensors file " + path);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  FB_ASSIGN_OR_RETURN(SafetensorsFile f,
                      ParseHeader(path, bytes.data(), bytes.size(), bytes.size()));
  f.bytes_ = std::move(bytes);
  return f;
}

StatusOr<SafetensorsFile> SafetensorsFile::ParseHeader(const std::string& path,
                                                       const uint8_t* bytes, size_t size,
                                                       uint64_t file_bytes) {
  SafetensorsFile f;
  f.path_ = path;
  const auto bad = [&](const std::string& why) {
    return DataLossError("safetensors " + path + ": " + why);
  };
  if (file_bytes < 8 || size < 8) return bad("file of " + std::to_string(file_bytes) + " bytes");
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  if (header_len > kMaxHeaderBytes || header_len > file_bytes - 8) {
    return bad("header length " + std::to_string(header_len) + " exceeds the file");
  }
  FB_CHECK_GE(size, 8 + header_len) << "ParseHeader needs the whole header of " << path;
  f.data_start_ = 8 + header_len;
  const size_t data_size = file_bytes - f.data_start_;
  Json header = Json::parse(bytes + 8, bytes + f.data_start_, nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return bad("header is not a JSON object");
  std::vector<std::pair<size_t, size_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const Json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return bad("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) return bad("__metadata__." + m.key() + " is not a string");
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets")) {
      return bad("tensor " + name + ": needs dtype, shape and data_offsets");
    }
    Entry e;
    if (!v["dtype"].is_string() || !ParseDType(v["dtype"].get<std::string>(), &e.dtype)) {
      return bad("tensor " + name + ": unknown dtype " + v["dtype"].dump());
    }
    if (!v["shape"].is_array()) return bad("tensor " + name + ": shape is not a list");
    for (const Json& d : v["shape"]) {
      if (!d.is_number_unsigned()) return bad("tensor " + name + ": bad dimension " + d.dump());
      e.shape.push_back(d.get<int64_t>());
    }
    const Json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned()) {
      return bad("tensor " + name + ": data_offsets must be two unsigned integers");
    }
    const size_t begin = off[0].get<size_t>(), end = off[1].get<size_t>();
    if (begin > end || end > data_size) {
      return bad("tensor " + name + ": data_offsets [" + std::to_string(begin) + ", " +
                 std::to_string(end) + ") outside the " + std::to_string(data_size) +
                 " data bytes");
    }
    e.offset = begin;
    e.bytes = end - begin;
    if (static_cast<size_t>(e.numel()) * StDTypeSize(e.dtype) != e.bytes) {
      return bad("tensor " + name + ": shape " + ShapeString(e.shape) + " of " +
                 StDTypeName(e.dtype) + " does not fill " + std::to_string(e.bytes) + " bytes");
    }
    ranges.emplace_back(begin, end);
    f.entries_.emplace(name, std::move(e));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) return bad("tensor data ranges overlap");
  }
  return f;
}

StatusOr<const SafetensorsFile::Entry*> SafetensorsFile::Find(const std::string& name,
                                                              StDType dtype) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) return NotFoundError(path_ + ": no tensor " + name);
  const Entry& e = it->second;
  if (e.dtype != dtype) {
    return InvalidArgumentError(path_ + ": tensor " + name + " is " + StDTypeName(e.dtype) +
                                ", expected " + StDTypeName(dtype));
  }
  return &e;
}

StatusOr<const SafetensorsFile::Entry*> SafetensorsFile::Find(
    const std::string& name, StDType dtype, const std::vector<int64_t>& shape) const {
  FB_ASSIGN_OR_RETURN(const Entry* found, Find(name, dtype));
  const Entry& e = *found;
  if (e.shape != shape) {
    return InvalidArgumentError(path_ + ": tensor " + name + " has shape " + ShapeString(e.shape) +
                                ", expected " + ShapeString(shape));
  }
  return &e;
}

}  // namespace fullband::checkpoint
