#include "comm/in_process_communicator.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>

#include "common/check.h"

namespace fullband::comm {

// One rank's part of a collective.
struct InProcessCommunicator::Post {
  enum class Kind : uint8_t { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kBarrier };
  Kind kind = Kind::kBarrier;
  const void* in = nullptr;
  void* out = nullptr;
  int64_t count = 0;  // elements (bytes for a broadcast)
  CommType type = CommType::kU8;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
};

namespace {

using Kind = InProcessCommunicator::Post::Kind;

// One collective: the posts of the ranks that have joined it so far.
struct Slot {
  std::vector<InProcessCommunicator::Post> posts;
  int joined = 0;
  int released = 0;  // Work handles destroyed: the slot is erased when all ranks' are
  bool done = false;
  std::string error;  // a mismatch between the ranks' posts
};

template <typename T>
void Reduce(const std::vector<const T*>& in, T* out, int64_t count, ReduceOp op) {
  for (int64_t i = 0; i < count; ++i) {
    T acc = in[0][i];
    for (size_t r = 1; r < in.size(); ++r) {
      acc = op == ReduceOp::kSum ? acc + in[r][i] : std::max(acc, in[r][i]);
    }
    out[i] = acc;
  }
}

// out[0, count) = the reduction of in[r][0, count) over r, in rank order.
void ReduceTyped(const std::vector<const void*>& in, void* out, int64_t count, CommType type,
                 ReduceOp op) {
  const auto typed = [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    std::vector<const T*> p;
    for (const void* v : in) p.push_back(static_cast<const T*>(v));
    Reduce<T>(p, static_cast<T*>(out), count, op);
  };
  switch (type) {
    case CommType::kF32:
      return typed(static_cast<float*>(nullptr));
    case CommType::kF64:
      return typed(static_cast<double*>(nullptr));
    case CommType::kI64:
      return typed(static_cast<int64_t*>(nullptr));
    case CommType::kU8:
      return typed(static_cast<uint8_t*>(nullptr));
  }
}

// Runs a complete collective: every rank's post is in `posts`.
void Execute(const std::vector<InProcessCommunicator::Post>& posts) {
  const InProcessCommunicator::Post& p0 = posts[0];
  const int n = static_cast<int>(posts.size());
  const size_t elem = CommTypeSize(p0.type);
  switch (p0.kind) {
    case Kind::kAllReduce: {
      std::vector<char> sum(p0.count * elem);
      std::vector<const void*> in;
      for (const auto& p : posts) in.push_back(p.out);
      ReduceTyped(in, sum.data(), p0.count, p0.type, p0.op);
      for (const auto& p : posts) std::memcpy(p.out, sum.data(), sum.size());
      return;
    }
    case Kind::kReduceScatter: {
      for (int r = 0; r < n; ++r) {
        std::vector<const void*> in;
        for (const auto& p : posts)
          in.push_back(static_cast<const char*>(p.in) + r * p0.count * elem);
        ReduceTyped(in, posts[r].out, p0.count, p0.type, p0.op);
      }
      return;
    }
    case Kind::kAllGather:
      for (const auto& dst : posts) {
        for (int r = 0; r < n; ++r) {
          std::memcpy(static_cast<char*>(dst.out) + r * p0.count * elem, posts[r].in,
                      p0.count * elem);
        }
      }
      return;
    case Kind::kBroadcast:
      for (int r = 0; r < n; ++r) {
        if (r != p0.root) std::memcpy(posts[r].out, posts[p0.root].out, p0.count);
      }
      return;
    case Kind::kBarrier:
      return;
  }
}

}  // namespace

struct InProcessCommunicator::Group {
  explicit Group(int n) : size(n) {}
  const int size;
  std::mutex mu;
  std::condition_variable done;
  std::map<int64_t, Slot> slots;  // by sequence number, while incomplete or not yet waited for
  // The groups Split made, by (sequence number of the split, color): the first member to get
  // there creates one, the others join it.
  std::map<std::pair<int64_t, int>, std::shared_ptr<Group>> children;
};

namespace {

class InProcessWork final : public Work {
 public:
  InProcessWork(std::shared_ptr<InProcessCommunicator::Group> group, int64_t seq)
      : group_(std::move(group)), seq_(seq) {}
  ~InProcessWork() override {
    std::lock_guard<std::mutex> lock(group_->mu);
    Slot& slot = group_->slots[seq_];
    if (++slot.released == group_->size) group_->slots.erase(seq_);
  }
  Status Wait(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(group_->mu);
    Slot* slot = &group_->slots[seq_];
    if (!group_->done.wait_for(lock, timeout, [&] { return slot->done; })) {
      return DeadlineExceededError("in-process collective #" + std::to_string(seq_) +
                                   ": not all ranks joined within " +
                                   std::to_string(timeout.count()) + " ms");
    }
    return slot->error.empty() ? OkStatus() : InternalError(slot->error);
  }

 private:
  std::shared_ptr<InProcessCommunicator::Group> group_;
  int64_t seq_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> InProcessCommunicator::CreateGroup(int size) {
  FB_CHECK(size >= 1) << "group size " << size;
  auto group = std::make_shared<Group>(size);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < size; ++r) out.emplace_back(new InProcessCommunicator(group, r));
  return out;
}

int InProcessCommunicator::size() const { return group_->size; }

std::unique_ptr<Work> InProcessCommunicator::Submit(Post post) {
  const int64_t seq = sequence_++;
  ++traffic_.collectives;
  std::lock_guard<std::mutex> lock(group_->mu);
  Slot& slot = group_->slots[seq];
  if (slot.posts.empty()) slot.posts.resize(group_->size);
  slot.posts[rank_] = post;
  if (++slot.joined == group_->size) {
    const Post& p0 = slot.posts[0];
    for (const Post& p : slot.posts) {
      if (p.kind != p0.kind || p.count != p0.count || p.type != p0.type || p.op != p0.op ||
          p.root != p0.root) {
        slot.error = "collective #" + std::to_string(seq) + " differs between ranks";
      }
    }
    if (slot.error.empty()) Execute(slot.posts);
    slot.done = true;
    group_->done.notify_all();
  }
  return std::make_unique<InProcessWork>(group_, seq);
}

std::unique_ptr<Work> InProcessCommunicator::AllReduceAsync(void* data, int64_t count,
                                                            CommType type, ReduceOp op) {
  traffic_.all_reduce += count * static_cast<int64_t>(CommTypeSize(type));
  return Submit({Kind::kAllReduce, nullptr, data, count, type, op, 0});
}

std::unique_ptr<Work> InProcessCommunicator::ReduceScatterAsync(const void* in, void* out,
                                                                int64_t count, CommType type,
                                                                ReduceOp op) {
  traffic_.reduce_scatter += count * size() * static_cast<int64_t>(CommTypeSize(type));
  return Submit({Kind::kReduceScatter, in, out, count, type, op, 0});
}

std::unique_ptr<Work> InProcessCommunicator::AllGatherAsync(const void* in, void* out,
                                                            int64_t count, CommType type) {
  traffic_.all_gather += count * size() * static_cast<int64_t>(CommTypeSize(type));
  return Submit({Kind::kAllGather, in, out, count, type, ReduceOp::kSum, 0});
}

std::unique_ptr<Work> InProcessCommunicator::BroadcastAsync(void* data, int64_t bytes, int root) {
  FB_CHECK(root >= 0 && root < size()) << "root " << root;
  traffic_.broadcast += bytes;
  return Submit({Kind::kBroadcast, nullptr, data, bytes, CommType::kU8, ReduceOp::kSum, root});
}

std::unique_ptr<Work> InProcessCommunicator::BarrierAsync() { return Submit({}); }

StatusOr<std::unique_ptr<Communicator>> InProcessCommunicator::Split(int color, int key) {
  FB_CHECK(color >= 0) << "color " << color;
  const int64_t split = sequence_;
  const int64_t mine[2] = {color, key};
  std::vector<int64_t> all(2 * size());
  FB_RETURN_IF_ERROR(AllGather(mine, all.data(), 2, CommType::kI64));
  std::vector<std::pair<int64_t, int>> members;  // (key, rank) of the ranks of this color
  for (int r = 0; r < size(); ++r) {
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
  }
  std::sort(members.begin(), members.end());
  const int new_rank = static_cast<int>(
      std::find(members.begin(), members.end(), std::make_pair<int64_t, int>(key, rank())) -
      members.begin());
  std::shared_ptr<Group> child;
  {
    std::lock_guard<std::mutex> lock(group_->mu);
    std::shared_ptr<Group>& slot = group_->children[{split, color}];
    if (slot == nullptr) slot = std::make_shared<Group>(static_cast<int>(members.size()));
    child = slot;
  }
  std::unique_ptr<Communicator> c(new InProcessCommunicator(std::move(child), new_rank));
  c->set_timeout(timeout());
  return c;
}

}  // namespace fullband::comm
