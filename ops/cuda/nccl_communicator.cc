// NcclCommunicator: comm::Communicator over NCCL on the stream of one CUDA backend
// (ops/nccl_communicator.h has the contract as callers see it). Each collective is enqueued
// on the backend's stream, so it runs after the ops issued before it and before those issued
// after it; its Work handle polls a cudaEvent recorded right behind it.
#include "ops/cuda/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <functional>
#include <thread>
#include <utility>

#include "common/check.h"
#include "common/logging.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_call.h"
#include "ops/cuda/plugin.h"

namespace fullband::ops {
namespace {

using Clock = std::chrono::steady_clock;
using comm::CommType;
using comm::Communicator;
using comm::ReduceOp;
using comm::Work;
using std::chrono::milliseconds;

static_assert(sizeof(ncclUniqueId) == FULLBAND_NCCL_UNIQUE_ID_BYTES,
              "FULLBAND_NCCL_UNIQUE_ID_BYTES (ops/cuda/plugin.h) differs from nccl.h");
static_assert(NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0), "ncclCommSplit needs NCCL >= 2.18");

// Note [Nonblocking NCCL]: every communicator is created with ncclConfig_t.blocking = 0, so
// that no NCCL call holds the host without bound: init, split and finalize return at once
// (ncclInProgress) and are polled against a deadline, with ncclCommAbort as the way out. The
// price: any call on such a communicator — a collective too, when NCCL connects to its peers
// lazily on first use — may return ncclInProgress before its kernel is on the stream. So each
// call is followed by AwaitReady, bounded by timeout(), before its event is recorded (an event
// recorded earlier would complete ahead of the collective) and before the next NCCL call (which
// NCCL requires). The issuing thread waits there only while NCCL sets up a connection, that is
// until the peers issue the same collective.

struct NcclType {
  ncclDataType_t type;
  int64_t bytes;
};

NcclType ToNccl(CommType type) {
  switch (type) {
    case CommType::kF32:
      return {ncclFloat32, 4};
    case CommType::kF64:
      return {ncclFloat64, 8};
    case CommType::kI64:
      return {ncclInt64, 8};
    case CommType::kU8:
      return {ncclUint8, 1};
  }
  FB_CHECK(false) << "unknown CommType " << static_cast<int>(type);
  return {ncclUint8, 1};
}

ncclRedOp_t ToNccl(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

ncclConfig_t NonblockingConfig() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // Note [Nonblocking NCCL]
  return config;
}

// The Status of NCCL's result `rc` for `what` on `comm` (null before there is one): INTERNAL for
// a call NCCL refuses (an invalid argument such as host memory), else UNAVAILABLE.
Status NcclStatus(ncclComm_t comm, ncclResult_t rc, const std::string& what) {
  std::string text = what + ": " + ncclGetErrorString(rc);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') text += " (" + std::string(last) + ")";
  if (rc == ncclInvalidArgument || rc == ncclInvalidUsage) return InternalError(text);
  return UnavailableError(text);
}

Status UseDevice(int device) {
  int current = -1;
  FB_RETURN_IF_ERROR(FB_CALL(cudaGetDevice(&current)));
  if (current != device) FB_RETURN_IF_ERROR(FB_CALL(cudaSetDevice(device)));
  return OkStatus();
}

// Between two polls: spin a little (a small collective completes in microseconds), then sleep,
// so that a long wait does not hold a core that the step's other threads need.
void PauseBeforePoll(int64_t polls) {
  if (polls < 64) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(polls < 1024 ? 20 : 200));
  }
}

std::string DeadlineText(const std::string& what, milliseconds timeout) {
  return what + " did not complete within " + std::to_string(timeout.count()) +
         " ms: a peer rank is gone or hung";
}

// Polls `comm` until it leaves ncclInProgress (Note [Nonblocking NCCL]): OK at ncclSuccess,
// UNAVAILABLE / INTERNAL naming `what` at an error, DEADLINE_EXCEEDED after `timeout`.
Status AwaitReady(ncclComm_t comm, const std::string& what, milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  for (int64_t polls = 0;; ++polls) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    if (rc != ncclSuccess) return NcclStatus(comm, rc, what + ": ncclCommGetAsyncError");
    if (state == ncclSuccess) return OkStatus();
    if (state != ncclInProgress) return NcclStatus(comm, state, what);
    if (Clock::now() >= deadline) return DeadlineExceededError(DeadlineText(what, timeout));
    PauseBeforePoll(polls);
  }
}

// Polls `event` until it has completed (OK), `comm` reports an asynchronous error (UNAVAILABLE:
// a peer failed or the network broke), or `timeout` passes (DEADLINE_EXCEEDED).
Status AwaitEvent(ncclComm_t comm, cudaEvent_t event, milliseconds timeout,
                  const std::string& what) {
  const Clock::time_point deadline = Clock::now() + timeout;
  for (int64_t polls = 0;; ++polls) {
    const cudaError_t done = cudaEventQuery(event);
    if (done == cudaSuccess) return OkStatus();
    if (done != cudaErrorNotReady) {
      (void)cudaGetLastError();
      return InternalError(what + ": cudaEventQuery: " + cudaGetErrorName(done) + ": " +
                           cudaGetErrorString(done));
    }
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state != ncclSuccess &&
        state != ncclInProgress) {
      return NcclStatus(comm, state, what);
    }
    if (Clock::now() >= deadline) return DeadlineExceededError(DeadlineText(what, timeout));
    PauseBeforePoll(polls);
  }
}

// What a communicator shares with its Work handles: the NCCL communicator and the barrier's
// buffer, released when the last of them is gone (Note [Teardown]).
struct NcclState {
  NcclState(int device, cudaStream_t stream) : device(device), stream(stream) {}
  NcclState(const NcclState&) = delete;
  NcclState& operator=(const NcclState&) = delete;
  ~NcclState();

  // Waits at most close_timeout for the work on the stream (the collectives issued, and the
  // backend's ops before them).
  Status Drain();

  const int device;
  const cudaStream_t stream;  // the backend's
  ncclComm_t comm = nullptr;
  float* barrier = nullptr;            // 64 device bytes; a barrier all-reduces the first float
  milliseconds close_timeout{60'000};  // the communicator's timeout() when it was destroyed
  bool failed = false;                 // a call failed: abort at teardown, do not finalize
};

// Note [Teardown]: a communicator whose collectives all completed is finalized —
// ncclCommFinalize waits for the peers to finalize theirs, then ncclCommDestroy frees it
// locally — so ranks destroy a group's communicators in the same order, as with MPI_Comm_free.
// One that failed, still has a collective on the stream after close_timeout (a peer is gone or
// hung), or does not finalize in time is aborted instead: ncclCommAbort ends its kernels, so
// teardown never hangs on a peer. The barrier buffer is freed last (cudaFree waits for the GPU).
NcclState::~NcclState() {
  if (comm != nullptr) {
    Status closed = UseDevice(device);
    if (closed.ok() && failed) closed = UnavailableError("a collective or the setup failed");
    if (closed.ok()) closed = Drain();
    if (closed.ok()) {
      const ncclResult_t rc = ncclCommFinalize(comm);
      closed = rc == ncclSuccess || rc == ncclInProgress
                   ? AwaitReady(comm, "ncclCommFinalize", close_timeout)
                   : NcclStatus(comm, rc, "ncclCommFinalize");
    }
    if (closed.ok()) {
      (void)ncclCommDestroy(comm);
    } else {
      FB_LOG(WARNING) << "NCCL communicator on GPU " << device
                      << " aborted at teardown: " << closed.ToString();
      (void)ncclCommAbort(comm);
    }
  }
  if (barrier != nullptr) (void)cudaFree(barrier);
}

Status NcclState::Drain() {
  cudaEvent_t event = nullptr;
  FB_RETURN_IF_ERROR(FB_CALL(cudaEventCreateWithFlags(&event, cudaEventDisableTiming)));
  Status drained = FB_CALL(cudaEventRecord(event, stream));
  if (drained.ok()) drained = AwaitEvent(comm, event, close_timeout, "the collectives in flight");
  (void)cudaEventDestroy(event);
  return drained;
}

// A new state on `device` and `stream`, with its barrier buffer; the caller creates the NCCL
// communicator into it.
StatusOr<std::shared_ptr<NcclState>> NewState(int device, cudaStream_t stream,
                                              milliseconds timeout) {
  FB_RETURN_IF_ERROR(UseDevice(device));
  auto state = std::make_shared<NcclState>(device, stream);
  state->close_timeout = timeout;
  FB_RETURN_IF_ERROR(FB_CALL(cudaMalloc(reinterpret_cast<void**>(&state->barrier), 64)));
  // On the backend's stream, ahead of any barrier (a plain cudaMemset would run on the legacy
  // stream, unordered with the backend's non-blocking one).
  FB_RETURN_IF_ERROR(FB_CALL(cudaMemsetAsync(state->barrier, 0, 64, stream)));
  return state;
}

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclState> state, std::string what)
      : state_(std::move(state)), what_(std::move(what)) {}
  ~NcclWork() override {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);  // released once it completes
  }

  // Enqueues `call` on the stream and records the event behind it; a failure is what Wait
  // returns.
  void Issue(const std::function<ncclResult_t()>& call, milliseconds timeout) {
    issued_ = Enqueue(call, timeout);
    if (!issued_.ok()) state_->failed = true;
  }

  Status Wait(milliseconds timeout) override {
    if (!issued_.ok()) return issued_;
    Status done = AwaitEvent(state_->comm, event_, timeout, what_);
    // A deadline may be waited out again (Wait(0) polls); an error ends the communicator.
    if (!done.ok() && done.code() != StatusCode::kDeadlineExceeded) state_->failed = true;
    return done;
  }

 private:
  Status Enqueue(const std::function<ncclResult_t()>& call, milliseconds timeout) {
    FB_RETURN_IF_ERROR(UseDevice(state_->device));
    FB_RETURN_IF_ERROR(FB_CALL(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)));
    const ncclResult_t rc = call();
    if (rc != ncclSuccess && rc != ncclInProgress) return NcclStatus(state_->comm, rc, what_);
    FB_RETURN_IF_ERROR(AwaitReady(state_->comm, what_ + " (issuing)", timeout));
    return FB_CALL(cudaEventRecord(event_, state_->stream));
  }

  std::shared_ptr<NcclState> state_;
  std::string what_;
  cudaEvent_t event_ = nullptr;
  Status issued_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<NcclState> state, int rank, int size)
      : state_(std::move(state)), rank_(rank), size_(size) {}
  // Note [Teardown], when the last Work handle is gone too.
  ~NcclCommunicator() override { state_->close_timeout = timeout(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }

  std::unique_ptr<Work> AllReduceAsync(void* data, int64_t count, CommType type,
                                       ReduceOp op) override;
  std::unique_ptr<Work> ReduceScatterAsync(const void* in, void* out, int64_t count, CommType type,
                                           ReduceOp op) override;
  std::unique_ptr<Work> AllGatherAsync(const void* in, void* out, int64_t count,
                                       CommType type) override;
  std::unique_ptr<Work> BroadcastAsync(void* data, int64_t bytes, int root) override;
  std::unique_ptr<Work> BarrierAsync() override;
  StatusOr<std::unique_ptr<Communicator>> Split(int color, int key) override;

 private:
  std::unique_ptr<Work> Issue(const char* kind, const std::function<ncclResult_t()>& call) {
    auto work = std::make_unique<NcclWork>(
        state_, std::string("NCCL ") + kind + " #" + std::to_string(sequence_++) + " of rank " +
                    std::to_string(rank_) + " of " + std::to_string(size_));
    work->Issue(call, timeout());
    return work;
  }

  std::shared_ptr<NcclState> state_;
  int rank_, size_;
  int64_t sequence_ = 0;  // collectives issued, for error messages
};

// A communicator over `state`, whose NCCL communicator has just become ready.
StatusOr<std::unique_ptr<Communicator>> Wrap(std::shared_ptr<NcclState> state,
                                             milliseconds timeout) {
  int rank = 0, size = 0;
  ncclResult_t rc = ncclCommUserRank(state->comm, &rank);
  if (rc == ncclSuccess) rc = ncclCommCount(state->comm, &size);
  if (rc != ncclSuccess) {
    state->failed = true;
    return NcclStatus(state->comm, rc, "ncclCommUserRank / ncclCommCount");
  }
  std::unique_ptr<Communicator> c(new NcclCommunicator(std::move(state), rank, size));
  c->set_timeout(timeout);
  return c;
}

std::unique_ptr<Work> NcclCommunicator::AllReduceAsync(void* data, int64_t count, CommType type,
                                                       ReduceOp op) {
  FB_CHECK_GE(count, 0);
  const NcclType t = ToNccl(type);
  traffic_.all_reduce += count * t.bytes;
  ++traffic_.collectives;
  const NcclState& s = *state_;
  return Issue("all-reduce", [&] {
    return ncclAllReduce(data, data, static_cast<size_t>(count), t.type, ToNccl(op), s.comm,
                         s.stream);
  });
}

std::unique_ptr<Work> NcclCommunicator::ReduceScatterAsync(const void* in, void* out, int64_t count,
                                                           CommType type, ReduceOp op) {
  FB_CHECK_GE(count, 0);
  const NcclType t = ToNccl(type);
  traffic_.reduce_scatter += count * size_ * t.bytes;
  ++traffic_.collectives;
  const NcclState& s = *state_;
  return Issue("reduce-scatter", [&] {
    return ncclReduceScatter(in, out, static_cast<size_t>(count), t.type, ToNccl(op), s.comm,
                             s.stream);
  });
}

std::unique_ptr<Work> NcclCommunicator::AllGatherAsync(const void* in, void* out, int64_t count,
                                                       CommType type) {
  FB_CHECK_GE(count, 0);
  const NcclType t = ToNccl(type);
  traffic_.all_gather += count * size_ * t.bytes;
  ++traffic_.collectives;
  const NcclState& s = *state_;
  return Issue("all-gather", [&] {
    return ncclAllGather(in, out, static_cast<size_t>(count), t.type, s.comm, s.stream);
  });
}

std::unique_ptr<Work> NcclCommunicator::BroadcastAsync(void* data, int64_t bytes, int root) {
  FB_CHECK(root >= 0 && root < size_) << "root " << root;
  FB_CHECK_GE(bytes, 0);
  traffic_.broadcast += bytes;
  ++traffic_.collectives;
  const NcclState& s = *state_;
  return Issue("broadcast", [&] {
    return ncclBroadcast(data, data, static_cast<size_t>(bytes), ncclUint8, root, s.comm, s.stream);
  });
}

std::unique_ptr<Work> NcclCommunicator::BarrierAsync() {
  ++traffic_.collectives;
  const NcclState& s = *state_;
  return Issue("barrier", [&] {
    return ncclAllReduce(s.barrier, s.barrier, 1, ncclFloat32, ncclSum, s.comm, s.stream);
  });
}

// ncclCommSplit runs over the parent's bootstrap connections on the host, not on the stream;
// with the collectives before it issued already (Note [Nonblocking NCCL]) it keeps their order.
StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::Split(int color, int key) {
  FB_CHECK(color >= 0) << "color " << color;
  ++traffic_.collectives;
  const std::string what = "ncclCommSplit(color " + std::to_string(color) + ", key " +
                           std::to_string(key) + ") of rank " + std::to_string(rank_) + " of " +
                           std::to_string(size_);
  FB_ASSIGN_OR_RETURN(std::shared_ptr<NcclState> child,
                      NewState(state_->device, state_->stream, timeout()));
  ncclConfig_t config = NonblockingConfig();
  const ncclResult_t rc = ncclCommSplit(state_->comm, color, key, &child->comm, &config);
  Status ready = rc == ncclSuccess || rc == ncclInProgress
                     ? AwaitReady(state_->comm, what, timeout())
                     : NcclStatus(state_->comm, rc, what);
  if (ready.ok() && child->comm == nullptr) ready = InternalError(what + " returned no group");
  if (ready.ok()) ready = AwaitReady(child->comm, what, timeout());
  if (!ready.ok()) {
    state_->failed = true;
    child->failed = true;
    return ready;
  }
  return Wrap(std::move(child), timeout());
}

}  // namespace

StatusOr<std::string> NewNcclGroupId() {
  ncclUniqueId id;
  const ncclResult_t rc = ncclGetUniqueId(&id);
  if (rc != ncclSuccess) return NcclStatus(nullptr, rc, "ncclGetUniqueId");
  return std::string(id.internal, sizeof(id.internal));
}

StatusOr<std::unique_ptr<Communicator>> JoinNcclGroup(Backend& backend, const std::string& id,
                                                      int rank, int size, milliseconds timeout) {
  if (id.size() != sizeof(ncclUniqueId)) {
    return InvalidArgumentError("NCCL group id has " + std::to_string(id.size()) + " bytes, want " +
                                std::to_string(sizeof(ncclUniqueId)));
  }
  if (size < 1 || rank < 0 || rank >= size) {
    return InvalidArgumentError("NCCL rank " + std::to_string(rank) + " of " +
                                std::to_string(size) + " does not exist");
  }
  FB_ASSIGN_OR_RETURN(CudaBackendStream cuda, CudaBackendStreamOf(backend));
  FB_ASSIGN_OR_RETURN(std::shared_ptr<NcclState> state,
                      NewState(cuda.device, static_cast<cudaStream_t>(cuda.stream), timeout));
  ncclUniqueId nccl_id;
  std::memcpy(nccl_id.internal, id.data(), sizeof(nccl_id.internal));
  ncclConfig_t config = NonblockingConfig();
  const std::string what = "NCCL init of rank " + std::to_string(rank) + " of " +
                           std::to_string(size) + " on GPU " + std::to_string(cuda.device);
  const ncclResult_t rc = ncclCommInitRankConfig(&state->comm, size, nccl_id, rank, &config);
  const Status ready = rc == ncclSuccess || rc == ncclInProgress
                           ? AwaitReady(state->comm, what, timeout)
                           : NcclStatus(state->comm, rc, what);
  if (!ready.ok()) {
    state->failed = true;  // the destructor aborts a communicator still joining
    return ready;
  }
  return Wrap(std::move(state), timeout);
}

}  // namespace fullband::ops
