#include "comm/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "comm/in_process_communicator.h"
#include "common/check.h"

namespace fullband::comm {
namespace {

// The text of an MPI error code.
std::string MpiError(const char* what, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(what) + ": " + std::string(text, len);
}

MPI_Datatype ToMpi(CommType type) {
  switch (type) {
    case CommType::kF32:
      return MPI_FLOAT;
    case CommType::kF64:
      return MPI_DOUBLE;
    case CommType::kI64:
      return MPI_INT64_T;
    case CommType::kU8:
      return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op ToMpi(ReduceOp op) { return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX; }

// MPI counts are ints: larger buffers go in pieces of at most this many elements.
constexpr int64_t kMaxPiece = int64_t{1} << 30;

// The completion of one queued collective.
struct Completion {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
};

class MpiWork final : public Work {
 public:
  explicit MpiWork(std::shared_ptr<Completion> c) : c_(std::move(c)) {}
  Status Wait(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(c_->mu);
    if (!c_->cv.wait_for(lock, timeout, [&] { return c_->done; })) {
      return DeadlineExceededError("MPI collective did not complete within " +
                                   std::to_string(timeout.count()) +
                                   " ms: a peer rank is gone or hung");
    }
    return c_->status;
  }

 private:
  std::shared_ptr<Completion> c_;
};

}  // namespace

// ---- MpiSession

StatusOr<std::unique_ptr<MpiSession>> MpiSession::Init(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return FailedPreconditionError("MPI is already initialized");
  int provided = 0;
  const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  if (rc != MPI_SUCCESS) return InternalError(MpiError("MPI_Init_thread", rc));
  std::unique_ptr<MpiSession> session(new MpiSession);
  if (provided < MPI_THREAD_MULTIPLE) {
    return FailedPreconditionError(
        "this MPI library does not provide MPI_THREAD_MULTIPLE (got level " +
        std::to_string(provided) + "), which the communicator's progress thread needs");
  }
  // Errors come back as codes (and become Status) instead of aborting inside MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return session;
}

MpiSession::~MpiSession() { MPI_Finalize(); }

bool MpiSession::LaunchedByMpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_RANK") != nullptr;
}

void MpiSession::Abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; if it did, do not linger
}

// ---- MpiCommunicator

// The progress thread and its queue of collectives (Note in the header).
struct MpiCommunicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<std::function<int()>, std::shared_ptr<Completion>>> queue;
  bool closing = false;
  std::thread thread;

  void Run() {
    std::unique_lock<std::mutex> lock(mu);
    while (true) {
      cv.wait(lock, [&] { return closing || !queue.empty(); });
      if (queue.empty()) return;
      auto [call, completion] = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      const int rc = call();
      {
        std::lock_guard<std::mutex> done(completion->mu);
        completion->done = true;
        if (rc != MPI_SUCCESS) completion->status = UnavailableError(MpiError("collective", rc));
      }
      completion->cv.notify_all();
      lock.lock();
    }
  }

  std::unique_ptr<Work> Enqueue(std::function<int()> call) {
    auto completion = std::make_shared<Completion>();
    {
      std::lock_guard<std::mutex> lock(mu);
      queue.emplace_back(std::move(call), completion);
    }
    cv.notify_one();
    return std::make_unique<MpiWork>(std::move(completion));
  }
};

StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::World() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return FailedPreconditionError("MPI is not initialized (MpiSession::Init)");
  auto impl = std::make_unique<Impl>();
  const int rc = MPI_Comm_dup(MPI_COMM_WORLD, &impl->comm);
  if (rc != MPI_SUCCESS) return InternalError(MpiError("MPI_Comm_dup", rc));
  MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN);
  std::unique_ptr<MpiCommunicator> c(new MpiCommunicator(std::move(impl)));
  return c;
}

MpiCommunicator::MpiCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  MPI_Comm_rank(impl_->comm, &rank_);
  MPI_Comm_size(impl_->comm, &size_);
  Impl* im = impl_.get();
  impl_->thread = std::thread([im] { im->Run(); });
}

MpiCommunicator::~MpiCommunicator() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->closing = true;
  }
  impl_->cv.notify_one();
  impl_->thread.join();
  MPI_Comm_free(&impl_->comm);
}

std::unique_ptr<Work> MpiCommunicator::AllReduceAsync(void* data, int64_t count, CommType type,
                                                      ReduceOp op) {
  const size_t elem = CommTypeSize(type);
  traffic_.all_reduce += count * static_cast<int64_t>(elem);
  ++traffic_.collectives;
  MPI_Comm comm = impl_->comm;
  return impl_->Enqueue([=] {
    for (int64_t at = 0; at < count; at += kMaxPiece) {
      const int n = static_cast<int>(std::min(kMaxPiece, count - at));
      const int rc = MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(data) + at * elem, n,
                                   ToMpi(type), ToMpi(op), comm);
      if (rc != MPI_SUCCESS) return rc;
    }
    return MPI_SUCCESS;
  });
}

std::unique_ptr<Work> MpiCommunicator::ReduceScatterAsync(const void* in, void* out, int64_t count,
                                                          CommType type, ReduceOp op) {
  FB_CHECK_LE(count, INT_MAX);
  traffic_.reduce_scatter += count * size_ * static_cast<int64_t>(CommTypeSize(type));
  ++traffic_.collectives;
  MPI_Comm comm = impl_->comm;
  return impl_->Enqueue([=] {
    return MPI_Reduce_scatter_block(in, out, static_cast<int>(count), ToMpi(type), ToMpi(op), comm);
  });
}

std::unique_ptr<Work> MpiCommunicator::AllGatherAsync(const void* in, void* out, int64_t count,
                                                      CommType type) {
  FB_CHECK_LE(count, INT_MAX);
  traffic_.all_gather += count * size_ * static_cast<int64_t>(CommTypeSize(type));
  ++traffic_.collectives;
  MPI_Comm comm = impl_->comm;
  return impl_->Enqueue([=] {
    return MPI_Allgather(in, static_cast<int>(count), ToMpi(type), out, static_cast<int>(count),
                         ToMpi(type), comm);
  });
}

std::unique_ptr<Work> MpiCommunicator::BroadcastAsync(void* data, int64_t bytes, int root) {
  FB_CHECK(root >= 0 && root < size_) << "root " << root;
  traffic_.broadcast += bytes;
  ++traffic_.collectives;
  MPI_Comm comm = impl_->comm;
  return impl_->Enqueue([=] {
    for (int64_t at = 0; at < bytes; at += kMaxPiece) {
      const int n = static_cast<int>(std::min(kMaxPiece, bytes - at));
      const int rc = MPI_Bcast(static_cast<char*>(data) + at, n, MPI_BYTE, root, comm);
      if (rc != MPI_SUCCESS) return rc;
    }
    return MPI_SUCCESS;
  });
}

std::unique_ptr<Work> MpiCommunicator::BarrierAsync() {
  ++traffic_.collectives;
  MPI_Comm comm = impl_->comm;
  return impl_->Enqueue([=] { return MPI_Barrier(comm); });
}

StatusOr<std::unique_ptr<Communicator>> MpiCommunicator::Split(int color, int key) {
  FB_CHECK(color >= 0) << "color " << color;
  ++traffic_.collectives;
  auto impl = std::make_unique<Impl>();
  MPI_Comm parent = impl_->comm;
  MPI_Comm* child = &impl->comm;
  // On the progress thread, in order with the collectives issued before it.
  const Status split = impl_
                           ->Enqueue([=] {
                             const int rc = MPI_Comm_split(parent, color, key, child);
                             if (rc == MPI_SUCCESS) {
                               MPI_Comm_set_errhandler(*child, MPI_ERRORS_RETURN);
                             }
                             return rc;
                           })
                           ->Wait(timeout());
  if (!split.ok()) {
    (void)impl.release();  // the blocked split may still write into it; the process ends
    return split;
  }
  std::unique_ptr<Communicator> c(new MpiCommunicator(std::move(impl)));
  c->set_timeout(timeout());
  return c;
}

StatusOr<ProcessGroup> JoinProcessGroup() {
  ProcessGroup g;
  if (!MpiSession::LaunchedByMpi()) {
    g.world = std::move(InProcessCommunicator::CreateGroup(1)[0]);
    return g;
  }
  FB_ASSIGN_OR_RETURN(g.mpi, MpiSession::Init(nullptr, nullptr));
  FB_ASSIGN_OR_RETURN(g.world, MpiCommunicator::World());
  return g;
}

}  // namespace fullband::comm
