// The manifest of a sharded checkpoint, `<root>/step-<N>/manifest.json`: what the checkpoint is
// (magic, version), every tensor's global shape, which piece of it each shard file holds, the
// XXH64 of every file, header and piece, and the training state that makes step N + 1 the
// same as in an uninterrupted run. The format is checkpoint/FORMAT.md, "Sharded checkpoints".
//
// Parse checks everything a loader relies on (types, ranges, pieces inside their tensors,
// file names without directories) and reports DATA_LOSS naming the manifest and the field.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/safetensors.h"
#include "common/status.h"

namespace fullband::checkpoint {

inline constexpr char kManifestMagic[] = "fullband-checkpoint";
inline constexpr int kManifestVersion = 1;
inline constexpr char kManifestName[] = "manifest.json";

// A piece of a tensor: elements [begin, end) of the row-major order of the box at `offset` of
// shape `shape` inside the global tensor. A whole tensor is the box at 0 of the global shape
// with [0, numel); a tensor-parallel slice is a smaller box; a ZeRO-1 or data-parallel shard is
// a range of a box.
struct TensorSlice {
  std::vector<int64_t> offset;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;

  int64_t numel() const { return end - begin; }
  bool operator==(const TensorSlice&) const = default;
};

// The global tensor, row-major (strides are derived from the shape).
struct GlobalTensor {
  StDType dtype = StDType::kF32;
  std::vector<int64_t> shape;
  bool operator==(const GlobalTensor&) const = default;
};

// One piece in a shard file, stored under the tensor's name: with the box's shape when it is the
// whole box, else as a flat list of numel() elements.
struct ShardPiece {
  std::string tensor;
  TensorSlice slice;
  uint64_t xxh64 = 0;  // of the piece's bytes
  bool operator==(const ShardPiece&) const = default;
};

struct ShardFile {
  std::string file;  // name inside the checkpoint directory
  int rank = 0;
  uint64_t bytes = 0;
  uint64_t xxh64 = 0;
  uint64_t header_bytes = 0;  // 8 + the JSON header's length
  uint64_t header_xxh64 = 0;
  std::vector<ShardPiece> pieces;
  bool operator==(const ShardFile&) const = default;
};

// How far one data source's stream has gone (dataloader/sampler.h, Note [Sampler cursor]).
struct SourceCursor {
  std::string store;
  uint64_t consumed = 0;
  bool operator==(const SourceCursor&) const = default;
};

// Everything besides the tensors that step N + 1 depends on.
struct TrainingState {
  int64_t step = 0;         // the checkpoint holds the state after steps [0, step)
  int64_t total_steps = 0;  // of the run or job (the learning-rate schedule's length)
  int64_t next_passes = 0;  // the pass count of step `step` (0 when it is the last)
  int64_t tokens = 0;       // the ledger of steps [0, step)
  int64_t token_equivalents = 0;
  int64_t optimizer_step = 0;         // AdamW updates applied (bias correction uses it + 1)
  uint64_t data_seed = 0;             // seeds the sampler and every step's draws
  uint64_t next_step_seed = 0;        // step `step`'s seed (common/step_plan.h)
  uint64_t sampler_draws = 0;         // global sequences drawn: step × data.batch_size
  std::vector<SourceCursor> sources;  // per token store; empty for a token file
  std::string tokenizer_hash;         // of the stores' tokenizer ("" for a token file)
  std::string config_yaml;            // the run's whole config
  int64_t tp = 1, dp = 1;             // the layout that wrote it
  bool zero1 = false;
  bool operator==(const TrainingState&) const = default;
};

struct Manifest {
  TrainingState state;
  std::map<std::string, GlobalTensor> tensors;
  std::vector<ShardFile> files;

  std::string ToJson() const;
  // `path` names the manifest in errors.
  static StatusOr<Manifest> Parse(std::string_view json, const std::string& path);
  bool operator==(const Manifest&) const = default;
};

// The JSON of one shard file's record (the per-rank note a rank leaves for rank 0) and back.
std::string ShardFileToJson(const ShardFile& file);
StatusOr<ShardFile> ParseShardFile(std::string_view json, const std::string& path);

int64_t NumElements(const std::vector<int64_t>& shape);
std::string HexXxh64(uint64_t h);  // 16 lowercase hex digits

}  // namespace fullband::checkpoint
