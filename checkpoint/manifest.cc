#include "checkpoint/manifest.h"

#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace fullband::checkpoint {
namespace {

using Json = nlohmann::json;

// Reading a JSON document field by field: every error names the document and the field's path.
class Fields {
 public:
  Fields(const std::string& path) : path_(path) {}

  Status Bad(const std::string& where, const std::string& why) const {
    return DataLossError("checkpoint manifest " + path_ + ": " + where + ": " + why);
  }
  StatusOr<const Json*> Get(const Json& j, const std::string& key, const std::string& where,
                            Json::value_t type) const {
    if (!j.is_object() || !j.contains(key)) return Bad(where + key, "missing");
    const Json& v = j[key];
    const bool ok = type == Json::value_t::number_unsigned  ? v.is_number_unsigned()
                    : type == Json::value_t::number_integer ? v.is_number_integer()
                                                            : v.type() == type;
    if (!ok) return Bad(where + key, "has the wrong type (" + std::string(v.type_name()) + ")");
    return &v;
  }
  StatusOr<int64_t> Int(const Json& j, const std::string& key, const std::string& where) const {
    FB_ASSIGN_OR_RETURN(const Json* v, Get(j, key, where, Json::value_t::number_unsigned));
    if (v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return Bad(where + key, "too large");
    return v->get<int64_t>();
  }
  StatusOr<uint64_t> U64(const Json& j, const std::string& key, const std::string& where) const {
    FB_ASSIGN_OR_RETURN(const Json* v, Get(j, key, where, Json::value_t::number_unsigned));
    return v->get<uint64_t>();
  }
  StatusOr<std::string> Str(const Json& j, const std::string& key, const std::string& where) const {
    FB_ASSIGN_OR_RETURN(const Json* v, Get(j, key, where, Json::value_t::string));
    return v->get<std::string>();
  }
  StatusOr<uint64_t> Hash(const Json& j, const std::string& key, const std::string& where) const {
    FB_ASSIGN_OR_RETURN(const std::string s, Str(j, key, where));
    uint64_t h = 0;
    if (s.size() != 16) return Bad(where + key, "not 16 hex digits");
    for (char c : s) {
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return Bad(where + key, "not 16 hex digits");
      h = h << 4 | static_cast<uint64_t>(d);
    }
    return h;
  }
  StatusOr<std::vector<int64_t>> Ints(const Json& j, const std::string& key,
                                      const std::string& where) const {
    FB_ASSIGN_OR_RETURN(const Json* v, Get(j, key, where, Json::value_t::array));
    std::vector<int64_t> out;
    for (const Json& d : *v) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 48)) {
        return Bad(where + key, "holds " + d.dump() + ", not a size");
      }
      out.push_back(d.get<int64_t>());
    }
    return out;
  }

 private:
  std::string path_;
};

StatusOr<StDType> ParseDTypeName(const Fields& f, const std::string& name,
                                 const std::string& where) {
  for (StDType t : {StDType::kF32, StDType::kF64, StDType::kI32, StDType::kI64, StDType::kU8,
                    StDType::kBF16, StDType::kF16}) {
    if (name == StDTypeName(t)) return t;
  }
  return f.Bad(where, "unknown dtype " + name);
}

Json SliceJson(const TensorSlice& s) {
  return {{"offset", s.offset}, {"shape", s.shape}, {"range", {s.begin, s.end}}};
}

Json ShardJson(const ShardFile& file) {
  Json pieces = Json::array();
  for (const ShardPiece& p : file.pieces) {
    Json j = SliceJson(p.slice);
    j["tensor"] = p.tensor;
    j["xxh64"] = HexXxh64(p.xxh64);
    pieces.push_back(std::move(j));
  }
  return {{"file", file.file},
          {"rank", file.rank},
          {"bytes", file.bytes},
          {"xxh64", HexXxh64(file.xxh64)},
          {"header_bytes", file.header_bytes},
          {"header_xxh64", HexXxh64(file.header_xxh64)},
          {"pieces", std::move(pieces)}};
}

StatusOr<TensorSlice> ParseSlice(const Fields& f, const Json& j, const std::string& where) {
  TensorSlice s;
  FB_ASSIGN_OR_RETURN(s.offset, f.Ints(j, "offset", where));
  FB_ASSIGN_OR_RETURN(s.shape, f.Ints(j, "shape", where));
  FB_ASSIGN_OR_RETURN(const std::vector<int64_t> range, f.Ints(j, "range", where));
  if (range.size() != 2 || range[0] > range[1] || range[1] > NumElements(s.shape)) {
    return f.Bad(where + "range", "not [begin, end) within the box");
  }
  if (s.offset.size() != s.shape.size()) return f.Bad(where + "offset", "rank differs from shape");
  s.begin = range[0];
  s.end = range[1];
  return s;
}

StatusOr<ShardFile> ParseShard(const Fields& f, const Json& j, const std::string& where) {
  ShardFile s;
  FB_ASSIGN_OR_RETURN(s.file, f.Str(j, "file", where));
  if (s.file.empty() || s.file.find('/') != std::string::npos || s.file[0] == '.') {
    return f.Bad(where + "file", "'" + s.file + "' is not a file name in the directory");
  }
  FB_ASSIGN_OR_RETURN(const int64_t rank, f.Int(j, "rank", where));
  s.rank = static_cast<int>(rank);
  FB_ASSIGN_OR_RETURN(s.bytes, f.U64(j, "bytes", where));
  FB_ASSIGN_OR_RETURN(s.xxh64, f.Hash(j, "xxh64", where));
  FB_ASSIGN_OR_RETURN(s.header_bytes, f.U64(j, "header_bytes", where));
  FB_ASSIGN_OR_RETURN(s.header_xxh64, f.Hash(j, "header_xxh64", where));
  FB_ASSIGN_OR_RETURN(const Json* pieces, f.Get(j, "pieces", where, Json::value_t::array));
  for (size_t i = 0; i < pieces->size(); ++i) {
    const std::string at = where + "pieces[" + std::to_string(i) + "].";
    ShardPiece p;
    FB_ASSIGN_OR_RETURN(p.tensor, f.Str((*pieces)[i], "tensor", at));
    FB_ASSIGN_OR_RETURN(p.slice, ParseSlice(f, (*pieces)[i], at));
    FB_ASSIGN_OR_RETURN(p.xxh64, f.Hash((*pieces)[i], "xxh64", at));
    s.pieces.push_back(std::move(p));
  }
  return s;
}

Json StateJson(const TrainingState& s) {
  Json sources = Json::array();
  for (const SourceCursor& c : s.sources) {
    sources.push_back({{"store", c.store}, {"consumed", c.consumed}});
  }
  return {{"step", s.step},
          {"schedule", {{"total_steps", s.total_steps}, {"next_passes", s.next_passes}}},
          {"ledger", {{"tokens", s.tokens}, {"token_equivalents", s.token_equivalents}}},
          {"optimizer", {{"kind", "adamw"}, {"step", s.optimizer_step}}},
          {"rng", {{"data_seed", s.data_seed}, {"next_step_seed", s.next_step_seed}}},
          {"sampler", {{"draws", s.sampler_draws}, {"sources", std::move(sources)}}},
          {"tokenizer_hash", s.tokenizer_hash},
          {"layout", {{"tp", s.tp}, {"dp", s.dp}, {"zero1", s.zero1}}},
          {"config", s.config_yaml}};
}

StatusOr<TrainingState> ParseState(const Fields& f, const Json& j) {
  TrainingState s;
  FB_ASSIGN_OR_RETURN(s.step, f.Int(j, "step", ""));
  FB_ASSIGN_OR_RETURN(const Json* sched, f.Get(j, "schedule", "", Json::value_t::object));
  FB_ASSIGN_OR_RETURN(s.total_steps, f.Int(*sched, "total_steps", "schedule."));
  FB_ASSIGN_OR_RETURN(s.next_passes, f.Int(*sched, "next_passes", "schedule."));
  FB_ASSIGN_OR_RETURN(const Json* ledger, f.Get(j, "ledger", "", Json::value_t::object));
  FB_ASSIGN_OR_RETURN(s.tokens, f.Int(*ledger, "tokens", "ledger."));
  FB_ASSIGN_OR_RETURN(s.token_equivalents, f.Int(*ledger, "token_equivalents", "ledger."));
  FB_ASSIGN_OR_RETURN(const Json* opt, f.Get(j, "optimizer", "", Json::value_t::object));
  FB_ASSIGN_OR_RETURN(s.optimizer_step, f.Int(*opt, "step", "optimizer."));
  FB_ASSIGN_OR_RETURN(const Json* rng, f.Get(j, "rng", "", Json::value_t::object));
  FB_ASSIGN_OR_RETURN(s.data_seed, f.U64(*rng, "data_seed", "rng."));
  FB_ASSIGN_OR_RETURN(s.next_step_seed, f.U64(*rng, "next_step_seed", "rng."));
  FB_ASSIGN_OR_RETURN(const Json* sampler, f.Get(j, "sampler", "", Json::value_t::object));
  FB_ASSIGN_OR_RETURN(s.sampler_draws, f.U64(*sampler, "draws", "sampler."));
  FB_ASSIGN_OR_RETURN(const Json* sources,
                      f.Get(*sampler, "sources", "sampler.", Json::value_t::array));
  for (size_t i = 0; i < sources->size(); ++i) {
    const std::string at = "sampler.sources[" + std::to_string(i) + "].";
    SourceCursor c;
    FB_ASSIGN_OR_RETURN(c.store, f.Str((*sources)[i], "store", at));
    FB_ASSIGN_OR_RETURN(c.consumed, f.U64((*sources)[i], "consumed", at));
    s.sources.push_back(std::move(c));
  }
  FB_ASSIGN_OR_RETURN(s.tokenizer_hash, f.Str(j, "tokenizer_hash", ""));
  FB_ASSIGN_OR_RETURN(const Json* layout, f.Get(j, "layout", "", Json::value_t::object));
  FB_ASSIGN_OR_RETURN(s.tp, f.Int(*layout, "tp", "layout."));
  FB_ASSIGN_OR_RETURN(s.dp, f.Int(*layout, "dp", "layout."));
  FB_ASSIGN_OR_RETURN(const Json* zero1,
                      f.Get(*layout, "zero1", "layout.", Json::value_t::boolean));
  s.zero1 = zero1->get<bool>();
  if (s.tp < 1 || s.dp < 1) return f.Bad("layout", "tp and dp must be >= 1");
  FB_ASSIGN_OR_RETURN(s.config_yaml, f.Str(j, "config", ""));
  return s;
}

// Every piece names a tensor of the manifest and lies inside it.
Status CheckPieces(const Fields& f, const Manifest& m) {
  for (const ShardFile& file : m.files) {
    for (const ShardPiece& p : file.pieces) {
      const std::string where = "files[" + file.file + "] piece " + p.tensor;
      auto it = m.tensors.find(p.tensor);
      if (it == m.tensors.end()) return f.Bad(where, "names no tensor of the manifest");
      const std::vector<int64_t>& shape = it->second.shape;
      if (p.slice.shape.size() != shape.size()) return f.Bad(where, "box rank differs");
      for (size_t d = 0; d < shape.size(); ++d) {
        if (p.slice.offset[d] + p.slice.shape[d] > shape[d]) {
          return f.Bad(where, "box outside the tensor's shape " + ShapeString(shape));
        }
      }
    }
  }
  return OkStatus();
}

}  // namespace

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string HexXxh64(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, h);
  return buf;
}

std::string ShardFileToJson(const ShardFile& file) { return ShardJson(file).dump(1); }

StatusOr<ShardFile> ParseShardFile(std::string_view json, const std::string& path) {
  const Json j = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  const Fields f(path);
  if (j.is_discarded() || !j.is_object()) return f.Bad("document", "not a JSON object");
  return ParseShard(f, j, "");
}

std::string Manifest::ToJson() const {
  Json tensors_json = Json::object();
  for (const auto& [name, t] : tensors) {
    std::vector<int64_t> strides(t.shape.size(), 1);
    for (size_t d = t.shape.size(); d-- > 1;) strides[d - 1] = strides[d] * t.shape[d];
    tensors_json[name] = {
        {"dtype", StDTypeName(t.dtype)}, {"shape", t.shape}, {"strides", strides}};
  }
  Json files_json = Json::array();
  for (const ShardFile& file : files) files_json.push_back(ShardJson(file));
  Json j = {{"magic", kManifestMagic}, {"version", kManifestVersion}};
  j.update(StateJson(state));
  j["tensors"] = std::move(tensors_json);
  j["files"] = std::move(files_json);
  return j.dump(1) + "\n";
}

StatusOr<Manifest> Manifest::Parse(std::string_view json, const std::string& path) {
  const Json j = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  const Fields f(path);
  if (j.is_discarded() || !j.is_object()) return f.Bad("document", "not a JSON object");
  FB_ASSIGN_OR_RETURN(const std::string magic, f.Str(j, "magic", ""));
  if (magic != kManifestMagic) {
    return f.Bad("magic", "'" + magic + "' is not '" + kManifestMagic + "'");
  }
  FB_ASSIGN_OR_RETURN(const int64_t version, f.Int(j, "version", ""));
  if (version != kManifestVersion) {
    return f.Bad("version", std::to_string(version) + " (this build reads version " +
                                std::to_string(kManifestVersion) + ")");
  }
  Manifest m;
  FB_ASSIGN_OR_RETURN(m.state, ParseState(f, j));
  FB_ASSIGN_OR_RETURN(const Json* tensors, f.Get(j, "tensors", "", Json::value_t::object));
  for (auto it = tensors->begin(); it != tensors->end(); ++it) {
    const std::string at = "tensors." + it.key() + ".";
    GlobalTensor t;
    FB_ASSIGN_OR_RETURN(const std::string dtype, f.Str(it.value(), "dtype", at));
    FB_ASSIGN_OR_RETURN(t.dtype, ParseDTypeName(f, dtype, at + "dtype"));
    FB_ASSIGN_OR_RETURN(t.shape, f.Ints(it.value(), "shape", at));
    m.tensors.emplace(it.key(), std::move(t));
  }
  FB_ASSIGN_OR_RETURN(const Json* files, f.Get(j, "files", "", Json::value_t::array));
  for (size_t i = 0; i < files->size(); ++i) {
    FB_ASSIGN_OR_RETURN(ShardFile s,
                        ParseShard(f, (*files)[i], "files[" + std::to_string(i) + "]."));
    m.files.push_back(std::move(s));
  }
  FB_RETURN_IF_ERROR(CheckPieces(f, m));
  return m;
}

}  // namespace fullband::checkpoint
