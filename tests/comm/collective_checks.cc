#include "tests/comm/collective_checks.h"

#include <cmath>
#include <numeric>
#include <vector>

namespace fullband::comm {
namespace {

#define EXPECT_OR_RETURN(cond, what) \
  if (!(cond)) return std::string(what) + " (rank " + std::to_string(comm.rank()) + ")"

// Rank r's value of element i: distinct per rank and element, exact in float.
float Value(int r, int64_t i) { return static_cast<float>((r + 1) * 1000 + i % 977); }

std::string AllReduceSumAndMax(Communicator& comm) {
  const int n = comm.size();
  // Odd lengths and one long enough to take several pieces of a ring.
  for (int64_t len : {int64_t{1}, int64_t{7}, int64_t{100003}}) {
    std::vector<float> x(len);
    for (int64_t i = 0; i < len; ++i) x[i] = Value(comm.rank(), i);
    const Status s = comm.AllReduce(x.data(), len, CommType::kF32, ReduceOp::kSum);
    EXPECT_OR_RETURN(s.ok(), "all-reduce: " + s.ToString());
    for (int64_t i = 0; i < len; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += Value(r, i);
      EXPECT_OR_RETURN(x[i] == want, "all-reduce sum of element " + std::to_string(i));
    }
  }
  int64_t v = 10 + comm.rank();
  EXPECT_OR_RETURN(comm.AllReduce(&v, 1, CommType::kI64, ReduceOp::kMax).ok(), "max");
  EXPECT_OR_RETURN(v == 10 + n - 1, "all-reduce max of int64");
  double d = 0.5 * comm.rank();
  EXPECT_OR_RETURN(comm.AllReduce(&d, 1, CommType::kF64, ReduceOp::kSum).ok(), "f64");
  EXPECT_OR_RETURN(d == 0.25 * n * (n - 1), "all-reduce sum of f64");
  return "";
}

std::string ScatterGatherBroadcast(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  const int64_t count = 5;
  std::vector<float> in(count * n), out(count);
  for (int64_t i = 0; i < count * n; ++i) in[i] = Value(me, i);
  EXPECT_OR_RETURN(
      comm.ReduceScatter(in.data(), out.data(), count, CommType::kF32, ReduceOp::kSum)
          .ok(),
      "reduce-scatter");
  for (int64_t i = 0; i < count; ++i) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += Value(r, me * count + i);
    EXPECT_OR_RETURN(out[i] == want, "reduce-scatter block element " + std::to_string(i));
  }
  std::vector<float> all(count * n);
  EXPECT_OR_RETURN(comm.AllGather(out.data(), all.data(), count, CommType::kF32).ok(),
                   "all-gather");
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < count; ++i) {
      float want = 0;
      for (int q = 0; q < n; ++q) want += Value(q, r * count + i);
      EXPECT_OR_RETURN(all[r * count + i] == want, "all-gather of rank " + std::to_string(r));
    }
  }
  char text[32] = {};
  const int root = n - 1;
  if (me == root) std::snprintf(text, sizeof(text), "from rank %d", root);
  EXPECT_OR_RETURN(comm.Broadcast(text, sizeof(text), root).ok(), "broadcast");
  EXPECT_OR_RETURN(std::string(text) == "from rank " + std::to_string(root), "broadcast text");
  EXPECT_OR_RETURN(comm.Barrier().ok(), "barrier");
  return "";
}

// Several collectives in flight at once complete, each with its own buffer.
std::string ManyInFlight(Communicator& comm) {
  std::vector<std::vector<float>> bufs(6, std::vector<float>(1000));
  std::vector<std::unique_ptr<Work>> works;
  for (size_t b = 0; b < bufs.size(); ++b) {
    std::iota(bufs[b].begin(), bufs[b].end(), static_cast<float>(b));
    works.push_back(
        comm.AllReduceAsync(bufs[b].data(), 1000, CommType::kF32, ReduceOp::kSum));
  }
  for (auto& w : works) {
    EXPECT_OR_RETURN(w->Wait(std::chrono::seconds(30)).ok(), "async all-reduce");
  }
  for (size_t b = 0; b < bufs.size(); ++b) {
    EXPECT_OR_RETURN(bufs[b][3] == comm.size() * (3.0f + b), "async buffer " + std::to_string(b));
  }
  return "";
}

// Split into the even and the odd ranks, each group ranked in reverse: sizes, ranks, and an
// all-reduce that sums exactly the members' world ranks; the parent still works afterwards.
std::string SplitEvenOdd(Communicator& comm) {
  const int me = comm.rank(), n = comm.size(), color = me % 2;
  StatusOr<std::unique_ptr<Communicator>> sub = comm.Split(color, /*key=*/-me);
  if (!sub.ok()) return "Split: " + sub.status().ToString();
  int members = 0, above = 0;  // ranks of my color, and those of them ranked before me
  int64_t expected = 0;
  for (int r = color; r < n; r += 2) {
    ++members;
    above += r > me;
    expected += r;
  }
  if ((*sub)->size() != members || (*sub)->rank() != above) {
    return "Split: rank " + std::to_string(me) + " became " + std::to_string((*sub)->rank()) +
           " of " + std::to_string((*sub)->size()) + ", expected " + std::to_string(above) +
           " of " + std::to_string(members);
  }
  int64_t sum = me;
  const Status s = (*sub)->AllReduce(&sum, 1, CommType::kI64, ReduceOp::kSum);
  if (!s.ok() || sum != expected) {
    return "Split: the group's sum is " + std::to_string(sum) + " (" + s.ToString() +
           "), expected " + std::to_string(expected);
  }
  int64_t all = 1;
  const Status p = comm.AllReduce(&all, 1, CommType::kI64, ReduceOp::kSum);
  if (!p.ok() || all != n) return "after Split the parent's sum is " + std::to_string(all);
  return "";
}

}  // namespace

std::string CheckCollectives(Communicator& comm) {
  for (auto* check : {&AllReduceSumAndMax, &ScatterGatherBroadcast, &ManyInFlight, &SplitEvenOdd}) {
    const std::string why = check(comm);
    if (!why.empty()) return why;
  }
  return "";
}

}  // namespace fullband::comm
