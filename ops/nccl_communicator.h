// CreateNcclCommunicator: the Communicator (communicator.h) of a group of GPUs, over NCCL, for
// device memory — each rank's buffers live on its CUDA backend's GPU (ops::Backend::Allocate).
//
// Where it lives: NCCL and the CUDA runtime are loaded only by the CUDA plugin
// (libfullband_cuda.so, ops/cuda/plugin.h), so the communicator is implemented there
// (ops/cuda/nccl_communicator.cc) and this file only reaches it through the plugin's C entry
// points: a CPU-only process never loads libnccl. The plugin uses comm::Communicator as a
// header only; its vtable is the plugin's, so the plugin must come from the same build
// (FULLBAND_CUDA_PLUGIN_ABI refuses another).
//
// Creation: collective over `bootstrap` (the MPI world, or an in-process group of one). Every
// rank checks that it can take part (a CUDA backend, the plugin's entry points) and the ranks
// agree by an all-reduce, so that all fail together; rank 0 makes an NCCL group id
// (ncclGetUniqueId) and broadcasts it, or its error, over `bootstrap` (BroadcastResult); then
// every rank joins (ncclCommInitRankConfig) as rank bootstrap.rank() of bootstrap.size(). The
// new communicator has bootstrap's ranks, its timeout(), and name() "nccl".
//
// Streams: each collective is enqueued on the backend's one stream, so it sees the results of
// the ops issued before it and the ops issued after it run after it, with no host
// synchronization; on the GPU it does not overlap the backend's kernels. AllReduceAsync and the
// others return once the collective is on the stream; Work::Wait polls a CUDA event recorded
// behind it (and ncclCommGetAsyncError) until it completes, the communicator reports an error
// (UNAVAILABLE), or the timeout passes (DEADLINE_EXCEEDED; Wait may be called again). Per the
// contract, the buffers belong to the collective until Wait returns OK even though later ops
// on the same stream are ordered after it.
//
// Timeouts: the communicator is nonblocking (ncclConfig_t.blocking = 0): init, Split
// (ncclCommSplit) and teardown are polled against timeout() instead of blocking in NCCL. An
// issuing call returns at once except while NCCL connects to the peers on the first use of a
// collective, when it waits (at most timeout()) for them to issue it too (Note [Nonblocking
// NCCL] in the plugin). Destruction waits at most timeout() for the collectives still on the
// stream, then finalizes with the peers, or calls ncclCommAbort when a collective failed or
// timed out, so it never hangs on a lost peer; ranks destroy a group's communicators in the
// same order.
//
// Determinism: NCCL reduces in the order of its ring or tree, not in rank order. Every rank
// gets the same bits, and a fixed group size, topology and NCCL version give the same bits run
// to run; with more than two ranks float sums may differ in rounding from MpiCommunicator's.
//
// Threading: as communicator.h. The backend must outlive the communicator and its Work handles.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "common/status.h"
#include "ops/backend.h"

namespace fullband::ops {

// Collective over `bootstrap` (see above); `backend` is this rank's CUDA backend, one GPU per
// rank. Errors, on every rank: FAILED_PRECONDITION when some rank has no CUDA backend (a CPU
// backend, a build without CUDA, no GPU) or a plugin without the NCCL entry points — the
// failing rank's message says why; rank 0's error making the id (UNAVAILABLE: no usable
// network interface); the bootstrap communicator's errors. Then, on the ranks it concerns:
// DEADLINE_EXCEEDED when the NCCL group did not form within bootstrap.timeout();
// UNAVAILABLE / INTERNAL for NCCL's and CUDA's errors.
StatusOr<std::unique_ptr<comm::Communicator>> CreateNcclCommunicator(comm::Communicator& bootstrap,
                                                                     ops::Backend& backend);

}  // namespace fullband::ops
