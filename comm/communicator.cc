#include "comm/communicator.h"

#include "common/check.h"

namespace fullband::comm {

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

StatusOr<std::string> BroadcastResult(Communicator& comm, int root,
                                      const StatusOr<std::string>& value,
                                      std::chrono::milliseconds timeout) {
  std::string bytes;
  int64_t header[2] = {0, 0};  // StatusCode, then the length of the bytes or of the message
  if (comm.rank() == root) {
    bytes = value.ok() ? *value : value.status().message();
    header[0] = static_cast<int64_t>(value.status().code());
    header[1] = static_cast<int64_t>(bytes.size());
  }
  FB_RETURN_IF_ERROR(comm.BroadcastAsync(header, sizeof(header), root)->Wait(timeout));
  bytes.resize(static_cast<size_t>(header[1]));
  FB_RETURN_IF_ERROR(comm.BroadcastAsync(bytes.data(), header[1], root)->Wait(timeout));
  if (header[0] != 0) return Status(static_cast<StatusCode>(header[0]), std::move(bytes));
  return bytes;
}

}  // namespace fullband::comm
