// MpiCommunicator: the Communicator (communicator.h) of an MPI communicator, for CPU memory
// (Open MPI). MpiSession initializes MPI for the process.
//
// Threading: MPI must be initialized with MPI_THREAD_MULTIPLE (MpiSession asks for it). Every
// collective is run by the communicator's own progress thread, one after another in issue
// order, with blocking MPI calls; so a non-blocking collective really proceeds while the
// issuing thread computes (Open MPI has no asynchronous progress of its own), which is what
// lets data-parallel gradient reduction overlap backward (docs/PARALLEL.md). A Work that times
// out leaves its collective blocked in that thread: the caller must end the process (Abort).
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "common/status.h"

namespace fullband::comm {

// MPI for this process: MPI_Init_thread(MPI_THREAD_MULTIPLE) in Init, MPI_Finalize in the
// destructor. One per process, created by main before any communicator.
class MpiSession {
 public:
  // FAILED_PRECONDITION if MPI was already initialized or does not provide
  // MPI_THREAD_MULTIPLE; INTERNAL if MPI_Init_thread fails.
  static StatusOr<std::unique_ptr<MpiSession>> Init(int* argc, char*** argv);
  ~MpiSession();

  // True when this process was started by an MPI launcher (mpirun, srun): the environment names
  // its rank. A process started alone runs without MPI.
  static bool LaunchedByMpi();
  // Ends every rank of MPI_COMM_WORLD with `code` (MPI_Abort). Any thread may call it.
  [[noreturn]] static void Abort(int code);

 private:
  MpiSession() = default;
};

class MpiCommunicator final : public Communicator {
 public:
  // A duplicate of MPI_COMM_WORLD with its own progress thread. Requires an MpiSession.
  static StatusOr<std::unique_ptr<MpiCommunicator>> World();
  // Waits for the collectives already issued, then frees the communicator.
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }

  std::unique_ptr<Work> AllReduceAsync(void* data, int64_t count, CommType type,
                                       ReduceOp op) override;
  std::unique_ptr<Work> ReduceScatterAsync(const void* in, void* out, int64_t count, CommType type,
                                           ReduceOp op) override;
  std::unique_ptr<Work> AllGatherAsync(const void* in, void* out, int64_t count,
                                       CommType type) override;
  std::unique_ptr<Work> BroadcastAsync(void* data, int64_t bytes, int root) override;
  std::unique_ptr<Work> BarrierAsync() override;
  StatusOr<std::unique_ptr<Communicator>> Split(int color, int key) override;

  struct Impl;

 private:
  explicit MpiCommunicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1;
};

// This process's group of ranks: MPI_COMM_WORLD when an MPI launcher started it
// (MpiSession::LaunchedByMpi), else one rank alone (InProcessCommunicator, no MPI).
struct ProcessGroup {
  std::unique_ptr<MpiSession> mpi;      // null without MPI; outlives `world`
  std::unique_ptr<Communicator> world;  // declared after `mpi`: destroyed first
};
// Errors: those of MpiSession::Init and MpiCommunicator::World.
StatusOr<ProcessGroup> JoinProcessGroup();

}  // namespace fullband::comm
