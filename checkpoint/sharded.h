// Sharded checkpoints on disk (checkpoint/FORMAT.md, "Sharded checkpoints"): every rank writes
// its shard file into a temporary directory, rank 0 commits the directory as
// `<root>/step-<N>/` with its manifest, and any layout reads back any slice of any tensor.
//
// Note [Checkpoint commit]: a checkpoint becomes visible only through a rename. Every rank writes
// `rank-<r>.safetensors` and its record `rank-<r>.json` into `<root>/.step-<N>.tmp-<token>/`
// and fsyncs both and the directory, whose creation (and the root's) is fsynced in its parent
// (WriteShard). After every rank has, rank 0 folds the records into
// `manifest.json`, fsyncs it and the directory, renames the directory to `step-<N>`, and fsyncs
// the root (CommitShards); only then is the checkpoint reported to the coordinator. A crash at
// any point leaves either no `step-<N>` (a temporary directory that ListCheckpoints shows as
// partial and PruneCheckpoints removes) or a complete one. Older checkpoints are removed only
// after a newer one is committed.
//
// Thread-safety: the functions are independent; a CheckpointReader is used by one thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "common/status.h"

namespace rocksdb {
class FileSystem;
}  // namespace rocksdb

namespace fullband::checkpoint {

// A piece a rank writes: `slice` of the tensor `tensor` of global shape `global_shape`, as
// slice.numel() floats at `data` (host memory, owned by the caller).
struct PieceRef {
  std::string tensor;
  std::vector<int64_t> global_shape;
  TensorSlice slice;
  const float* data = nullptr;
};

std::string StepDirName(int64_t step);                            // "step-<N>"
std::string ShardFileName(int rank);                              // "rank-00000.safetensors"
std::string TempDirName(int64_t step, const std::string& token);  // ".step-<N>.tmp-<token>"
int64_t ParseStepDirName(const std::string& name);  // "step-<N>" → N; anything else → -1

// Every rank: writes its shard file and record into `temp_dir` (created if missing), fsynced.
// Returns the record (what the manifest will say of the file). Writes go through `file_system`
// (null: the POSIX one), as do CommitShards's.
StatusOr<ShardFile> WriteShard(const std::string& temp_dir, int rank,
                               const std::vector<PieceRef>& pieces,
                               rocksdb::FileSystem* file_system = nullptr);

// Rank 0, after WriteShard returned OK on ranks [0, ranks): writes the manifest of `state`,
// `tensors` (every tensor's global shape) and the records, then renames `temp_dir` to
// `<root>/step-<state.step>` (replacing a complete one of the same step, which can only be an
// uncommitted leftover of an earlier attempt). Returns the checkpoint's path. DATA_LOSS when a
// record is missing or the pieces do not cover every tensor.
StatusOr<std::string> CommitShards(const std::string& root, const std::string& temp_dir, int ranks,
                                   const TrainingState& state,
                                   const std::map<std::string, GlobalTensor>& tensors,
                                   rocksdb::FileSystem* file_system = nullptr);

struct CheckpointEntry {
  int64_t step = 0;
  std::string path;
  bool complete = false;   // a step-<N> directory with a readable manifest
  std::string problem;     // why it is not complete (partial: "temporary", "no manifest", ...)
  uint64_t bytes = 0;      // of every file in the directory
  int64_t tp = 0, dp = 0;  // the layout that wrote it (complete ones)
  bool zero1 = false;
};

// Every checkpoint directory under `root`, complete and partial, by step then path. NOT_FOUND
// when root does not exist.
StatusOr<std::vector<CheckpointEntry>> ListCheckpoints(const std::string& root);

// After the checkpoint of `committed_step` was committed: removes partial directories (but the
// temporary directories named with `token`, which the calling group may be writing), complete
// ones above committed_step (left by an attempt that was rolled back), and all but the `keep`
// newest at or below it (keep 0: none removed).
Status PruneCheckpoints(const std::string& root, int64_t committed_step, int64_t keep,
                        const std::string& token);

class CheckpointReader {
 public:
  // Reads the manifest of the checkpoint directory `dir` and checks that every file exists with
  // the size it records. NOT_FOUND: no such directory or manifest; DATA_LOSS: a bad manifest, a
  // missing or truncated file (named).
  static StatusOr<std::unique_ptr<CheckpointReader>> Open(const std::string& dir);
  ~CheckpointReader();

  const Manifest& manifest() const { return manifest_; }
  const std::string& dir() const { return dir_; }

  // Reads `want` of the F32 tensor `name` into out (want.numel() floats) from the pieces that
  // hold it, reading only those pieces; each piece's bytes and its file's header are checked
  // against their hashes before they are used. NOT_FOUND: no such tensor; INVALID_ARGUMENT: a
  // slice outside it or another dtype; DATA_LOSS naming the file and tensor: a hash mismatch,
  // a header that disagrees with the manifest, or part of `want` in no piece.
  Status Read(const std::string& name, const TensorSlice& want, float* out);

  // Every file's whole-file hash (what `fullband ckpt verify` checks beyond Read's).
  Status VerifyFiles();

 private:
  struct OpenFile;
  CheckpointReader() = default;
  StatusOr<OpenFile*> File(size_t index);
  Status ReadPiece(size_t file, size_t piece, std::vector<float>* out);

  std::string dir_;
  Manifest manifest_;
  std::map<std::string, std::vector<std::pair<size_t, size_t>>> pieces_;  // tensor → (file, piece)
  std::vector<std::unique_ptr<OpenFile>> files_;
};

// The slice that is the whole of a tensor of `shape`.
TensorSlice WholeTensor(const std::vector<int64_t>& shape);

}  // namespace fullband::checkpoint
