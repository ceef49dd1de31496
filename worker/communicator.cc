#include "worker/communicator.h"

#include "common/check.h"

namespace fullband::worker {

size_t CommTypeSize(CommType type) {
  switch (type) {
    case CommType::kF32:
      return 4;
    case CommType::kF64:
    case CommType::kI64:
      return 8;
    case CommType::kU8:
      return 1;
  }
  FB_CHECK(false) << "unknown CommType " << static_cast<int>(type);
  return 0;
}

Status Communicator::AllReduce(void* data, int64_t count, CommType type, ReduceOp op) {
  return AllReduceAsync(data, count, type, op)->Wait(timeout_);
}

Status Communicator::ReduceScatter(const void* in, void* out, int64_t count, CommType type,
                                   ReduceOp op) {
  return ReduceScatterAsync(in, out, count, type, op)->Wait(timeout_);
}

Status Communicator::AllGather(const void* in, void* out, int64_t count, CommType type) {
  return AllGatherAsync(in, out, count, type)->Wait(timeout_);
}

Status Communicator::Broadcast(void* data, int64_t bytes, int root) {
  return BroadcastAsync(data, bytes, root)->Wait(timeout_);
}

Status Communicator::Barrier() { return BarrierAsync()->Wait(timeout_); }

}  // namespace fullband::worker
