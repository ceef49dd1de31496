#include "worker/data_parallel.h"

#include <algorithm>

#include "common/check.h"

namespace fullband::worker {

// Note [Gradient buckets]: a bucket is a run of whole parameters adjacent in the table, so its
// gradients are one contiguous range of the arena and one all-reduce moves them; the buckets
// tile the arena (the alignment padding between tensors, always zero, goes along), so a step
// all-reduces exactly 4 · table.total_numel() bytes of gradients. Buckets are
// filled from the end of the table, because backward finishes the last layers first (then the
// final norm, then layer L-2 down to 0; the embedding and the feedback parameters only at the
// end): the first buckets to complete are the first to go. Smaller buckets start sooner but
// pay the per-collective latency more often; docs/PARALLEL.md has the measured trade-off.
GradientReducer::GradientReducer(const model::ParameterTable& table, float* grads,
                                 comm::Communicator* dp, int64_t bucket_bytes)
    : table_(table), grads_(grads), dp_(dp) {
  const std::vector<model::ParamSpec>& specs = table.specs();
  const int n = static_cast<int>(specs.size());
  bucket_of_.assign(n, -1);
  final_.assign(n, false);
  const int64_t bucket_floats = std::max<int64_t>(1, bucket_bytes / 4);
  int64_t next_begin = table.total_numel();  // buckets tile the whole arena, padding included
  for (int i = n - 1; i >= 0;) {
    const int last = i;
    int64_t floats = 0;
    while (i >= 0 && (floats == 0 || floats + specs[i].numel <= bucket_floats)) {
      floats += specs[i--].numel;
    }
    const int first = i + 1;
    Bucket b;
    b.specs = last - i;
    b.begin = first == 0 ? 0 : specs[first].offset;
    b.end = next_begin;
    next_begin = b.begin;
    for (int j = first; j <= last; ++j) bucket_of_[j] = static_cast<int>(buckets_.size());
    buckets_.push_back(std::move(b));
  }
}

void GradientReducer::BeginStep() {
  std::fill(final_.begin(), final_.end(), false);
  for (Bucket& b : buckets_) {
    FB_CHECK(b.work == nullptr) << "a step began before the last one finished";
    b.pending = b.specs;
  }
  exposed_seconds_ = 0;
  started_early_ = 0;
  hidden_fraction_ = 0;
}

void GradientReducer::Start(Bucket& b) {
  b.work = dp_->AllReduceAsync(grads_ + b.begin, b.end - b.begin, comm::CommType::kF32,
                               comm::ReduceOp::kSum);
}

void GradientReducer::MarkFinal(int64_t begin, int64_t end) {
  const std::vector<model::ParamSpec>& specs = table_.specs();
  // The first spec at or after `begin` (specs are in offset order).
  auto it = std::lower_bound(specs.begin(), specs.end(), begin,
                             [](const model::ParamSpec& s, int64_t at) { return s.offset < at; });
  for (; it != specs.end() && it->offset + it->numel <= end; ++it) {
    const int i = static_cast<int>(it - specs.begin());
    if (final_[i]) continue;
    final_[i] = true;
    Bucket& b = buckets_[bucket_of_[i]];
    if (--b.pending == 0) {
      Start(b);
      ++started_early_;
    }
  }
}

Status GradientReducer::Finish(std::chrono::milliseconds timeout) {
  int64_t hidden = 0;
  for (Bucket& b : buckets_) {
    if (b.work != nullptr && b.work->Wait(std::chrono::milliseconds(0)).ok()) {
      hidden += b.end - b.begin;
    }
  }
  hidden_fraction_ = static_cast<double>(hidden) / static_cast<double>(table_.total_numel());
  for (Bucket& b : buckets_) {
    if (b.pending > 0) {
      b.pending = 0;
      Start(b);
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  Status status;
  for (Bucket& b : buckets_) {
    if (status.ok()) status = b.work->Wait(timeout);  // after a failure, only let go
    b.work.reset();
  }
  exposed_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return status;
}

}  // namespace fullband::worker
