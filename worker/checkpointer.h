// Checkpointer: one rank's side of the sharded checkpoints of checkpoint/sharded.h — what it
// saves, saving in the background while training goes on, committing with the group, and
// restoring any layout's checkpoint into this rank's model and optimizer.
//
// What a rank writes: the parameters and AdamW moments of one range of the parameter arena, as
// pieces of the table's tensors (`<name>`, `optim.m.<name>`, `optim.v.<name>`; docs/MODEL.md
// names). The ranges of the dp ranks tile the arena — under ZeRO-1 each is the rank's optimizer
// shard, else an equal split — so replicated parameters are written once, by all ranks together.
//
// Note [Asynchronous save]: Save copies the range into host buffers (the only pause of the
// step) and a thread writes and fsyncs the shard. Every rank calls Poll at every step boundary;
// while a save is in flight, Poll all-reduces (still writing, failed) over the group, and when
// every rank is done rank 0 commits the directory (Note [Checkpoint commit]) and the commit
// callback reports it (CommitCheckpoint). At most one save is in flight: Save first waits for the
// previous one. A failed save is logged on the rank that failed and on rank 0; `max_failures`
// failures in a row fail the run.
//
// Threading: the ranks' training threads call every method, in the same order on every rank.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/sharded.h"
#include "comm/communicator.h"
#include "common/status.h"
#include "model/model.h"
#include "model/optimizer.h"

namespace fullband::worker {

class Checkpointer {
 public:
  struct Options {
    std::string root;         // <checkpoint.dir>; "" = this run does not save
    int64_t every_steps = 0;  // 0: only at the end
    int64_t keep = 0;         // committed checkpoints kept; 0 = all
    int max_failures = 2;     // failed saves in a row that fail the run
  };
  // Reports a committed checkpoint (rank 0): the state after steps [0, step) is at `path`.
  using CommitFn = std::function<Status(int64_t step, const std::string& path, int64_t shards)>;

  // `model`, `optimizer` and `comm` (the whole group, dp ranks) outlive the checkpointer. All
  // ranks call Create together (rank 0 draws the token that names temporary directories).
  static StatusOr<std::unique_ptr<Checkpointer>> Create(Options options, model::Model* model,
                                                        model::AdamW* optimizer,
                                                        comm::Communicator* comm, int dp_rank,
                                                        int dp);
  ~Checkpointer();  // waits for a write in flight; it is not committed

  bool enabled() const { return !options_.root.empty(); }
  // Whether the state after `steps_done` steps is saved: every every_steps, and at the end.
  bool Due(int64_t steps_done, int64_t total_steps) const;

  // Snapshots the state after steps [0, state.step) and starts writing it (Note [Asynchronous
  // save]); waits for the previous save first.
  Status Save(const checkpoint::TrainingState& state, const CommitFn& commit);
  // At a step boundary (every rank): moves a save in flight on; `wait`: until it has ended.
  // Errors: the communicator's; the save's, once max_failures saves in a row failed.
  Status Poll(bool wait, const CommitFn& commit);
  // Waits for a write in flight and drops it uncommitted (the run is ending early).
  void Abandon();
  // How long the last Save paused the step (the snapshot), in seconds.
  double last_stall_seconds() const { return stall_seconds_; }

  // Loads the checkpoint directory `dir` into the model and optimizer — every hash and shape is
  // checked before either is touched — and returns its training state. This rank reads only the
  // pieces it needs. Errors: those of checkpoint::CheckpointReader; INVALID_ARGUMENT when the
  // checkpoint is of another model (a tensor missing, extra or of another shape).
  StatusOr<checkpoint::TrainingState> Restore(const std::string& dir);

 private:
  Checkpointer(Options options, model::Model* model, model::AdamW* optimizer,
               comm::Communicator* comm)
      : options_(std::move(options)), model_(model), optimizer_(optimizer), comm_(comm) {}
  // Rank 0: the manifest, the rename, the commit callback and pruning.
  Status FirstWriteError(Status* s);
  Status Commit(const CommitFn& commit);
  std::vector<checkpoint::PieceRef> Pieces() const;

  Options options_;
  model::Model* model_;
  model::AdamW* optimizer_;
  comm::Communicator* comm_;
  int rank_ = 0;
  std::string token_;                  // names this group's temporary directories
  int64_t begin_ = 0, end_ = 0;        // the arena range this rank writes
  std::vector<float> params_, m_, v_;  // host snapshot of the range

  // The save in flight.
  bool in_flight_ = false;
  checkpoint::TrainingState state_;
  std::string temp_dir_;
  std::thread writer_;
  std::atomic<bool> written_{false};
  Status write_status_;  // set by the writer before written_
  int failures_ = 0;
  double stall_seconds_ = 0;
};

}  // namespace fullband::worker
