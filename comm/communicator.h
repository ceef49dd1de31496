// Communicator: the collectives of one group of ranks (docs/PARALLEL.md) — AllReduce,
// ReduceScatter, AllGather, Broadcast and Barrier — behind one interface, so that what is
// communicated stays apart from what is computed (the trainer and the model's tensor-parallel
// layers compose collectives around ops; no op calls one). The lowest floor above common
// (docs/DESIGN.md §3): it knows nothing of backends or devices.
//
// Implementations: MpiCommunicator (comm/mpi_communicator.h, Open MPI, CPU memory),
// InProcessCommunicator (comm/in_process_communicator.h: threads of one process, for tests
// and for a single-process run), and the NCCL communicator for CUDA memory, inside the CUDA
// plugin (ops/nccl_communicator.h).
//
// Contract (PyTorch c10d's): every rank of a group issues the same collectives in the same
// order with the same counts and types. Each collective is non-blocking: it returns a Work
// handle at once, and its buffers belong to the collective until Wait returns OK. Wait(timeout)
// returns DEADLINE_EXCEEDED when the collective has not completed in time — a peer is gone or
// hung — and the group is then unusable: the caller reports the error and ends the process
// (`fullband worker` and `fullband train` abort the whole MPI job: MpiSession::Abort). Reductions
// combine ranks in rank order, so the result is the same on every rank and, for a fixed group size,
// the same in every run.
//
// Threading: one thread issues a communicator's collectives; a Work handle may be waited for
// from that thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace fullband::comm {

enum class CommType : uint8_t { kF32, kF64, kI64, kU8 };
enum class ReduceOp : uint8_t { kSum, kMax };

size_t CommTypeSize(CommType type);

// A collective in flight.
class Work {
 public:
  virtual ~Work() = default;
  // OK once the collective completed on this rank; DEADLINE_EXCEEDED after `timeout` without
  // completion (Wait may then be called again: Wait(0) asks whether it is done);
  // UNAVAILABLE / INTERNAL for an error of the transport.
  [[nodiscard]] virtual Status Wait(std::chrono::milliseconds timeout) = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "mpi", "in-process" or "nccl".
  virtual std::string name() const = 0;

  // In place: `data` holds `count` elements on every rank; afterwards, on every rank, their
  // element-wise reduction over the ranks.
  virtual std::unique_ptr<Work> AllReduceAsync(void* data, int64_t count, CommType type,
                                               ReduceOp op) = 0;
  // `in` holds size()·count elements; `out` gets the `count` elements of block rank() of their
  // reduction over the ranks. `in` and `out` do not overlap.
  virtual std::unique_ptr<Work> ReduceScatterAsync(const void* in, void* out, int64_t count,
                                                   CommType type, ReduceOp op) = 0;
  // `in` holds `count` elements; `out` gets size()·count, rank r's at r·count. No overlap.
  virtual std::unique_ptr<Work> AllGatherAsync(const void* in, void* out, int64_t count,
                                               CommType type) = 0;
  // `bytes` bytes of `data` of rank `root` into `data` of every rank.
  virtual std::unique_ptr<Work> BroadcastAsync(void* data, int64_t bytes, int root) = 0;
  virtual std::unique_ptr<Work> BarrierAsync() = 0;

  // A new group of the ranks that pass the same `color` (>= 0), ranked by `key`, ties by rank
  // (MPI_Comm_split): how the tensor- and data-parallel groups are cut from the world
  // (docs/PARALLEL.md). Collective: every rank calls it, in the same order as its other
  // collectives, and it waits for them at most timeout(). The new group has its own order of
  // collectives and the same timeout.
  [[nodiscard]] virtual StatusOr<std::unique_ptr<Communicator>> Split(int color, int key) = 0;

  // Blocking forms: the collective, waited for timeout().
  [[nodiscard]] Status AllReduce(void* data, int64_t count, CommType type, ReduceOp op);
  [[nodiscard]] Status ReduceScatter(const void* in, void* out, int64_t count, CommType type,
                                     ReduceOp op);
  [[nodiscard]] Status AllGather(const void* in, void* out, int64_t count, CommType type);
  [[nodiscard]] Status Broadcast(void* data, int64_t bytes, int root);
  [[nodiscard]] Status Barrier();

  // How long the blocking forms wait (default 60 s).
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  // What this rank has handed to collectives since it was created, by kind: the bytes of the
  // reduced buffer (all-reduce), of the full buffer (reduce-scatter's input, all-gather's
  // output), and of broadcast payloads. docs/PARALLEL.md turns them into bytes on the wire.
  struct Traffic {
    int64_t all_reduce = 0, reduce_scatter = 0, all_gather = 0, broadcast = 0;
    int64_t collectives = 0;
    Traffic& operator+=(const Traffic& o) {
      all_reduce += o.all_reduce;
      reduce_scatter += o.reduce_scatter;
      all_gather += o.all_gather;
      broadcast += o.broadcast;
      collectives += o.collectives;
      return *this;
    }
  };
  const Traffic& traffic() const { return traffic_; }

 protected:
  Traffic traffic_;

 private:
  std::chrono::milliseconds timeout_{60'000};
};

// Rank `root`'s `value` — bytes, or an error — on every rank, by two broadcasts (the status
// code and length, then the bytes); `value` is read on the root only. Each broadcast waits at
// most `timeout`. Errors: the root's error, on every rank; the communicator's.
StatusOr<std::string> BroadcastResult(Communicator& comm, int root,
                                      const StatusOr<std::string>& value,
                                      std::chrono::milliseconds timeout);

}  // namespace fullband::comm
