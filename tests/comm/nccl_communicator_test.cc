// The NCCL communicator (ops/nccl_communicator.h) on GPUs: every collective, with every type
// and reduction, against the same collective of the bootstrap group on host memory — the
// in-process group of one when run alone, MpiCommunicator under mpirun (one GPU per rank, the
// rank's index on its node). The GPU tests skip, on every rank together, where a rank has no
// CUDA backend (FULLBAND_REQUIRE_CUDA=1 makes that a failure, naming why); the refusal of a CPU
// backend runs anywhere. Values are small integers, exact in every type, so a sum does not
// depend on the order NCCL adds in; one test checks unrounded floats for the same bits on
// every rank.
#include "ops/nccl_communicator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "comm/mpi_communicator.h"
#include "ops/backend.h"

namespace fullband::comm {
namespace {

using Bytes = std::vector<uint8_t>;

// This process's group (set by main): the bootstrap of every NCCL communicator and the
// reference every result is compared with.
Communicator* g_world = nullptr;
Communicator& World() { return *g_world; }

constexpr CommType kTypes[] = {CommType::kF32, CommType::kF64, CommType::kI64, CommType::kU8};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax};

std::string Describe(CommType type, ReduceOp op, int64_t count) {
  return "type " + std::to_string(static_cast<int>(type)) + ", op " +
         std::to_string(static_cast<int>(op)) + ", count " + std::to_string(count);
}

// This rank's GPU: its index among the ranks on its node.
int LocalRank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (const char* value = std::getenv(name)) return std::atoi(value);
  }
  return 0;
}

template <typename T>
void Store(Bytes& bytes, int64_t i, int value) {
  const T v = static_cast<T>(value);
  std::memcpy(bytes.data() + i * sizeof(T), &v, sizeof(T));
}

// `count` elements of `type` for rank `rank`: integers in [0, 100) that differ between ranks
// and elements, so that sums stay exact (in u8 too, for up to two ranks) and maxima pick ranks.
Bytes Values(CommType type, int64_t count, int rank, int salt) {
  Bytes bytes(static_cast<size_t>(count) * CommTypeSize(type));
  for (int64_t i = 0; i < count; ++i) {
    const int v = static_cast<int>((rank * 37 + i * 11 + salt * 7) % 100);
    switch (type) {
      case CommType::kF32:
        Store<float>(bytes, i, v);
        break;
      case CommType::kF64:
        Store<double>(bytes, i, v);
        break;
      case CommType::kI64:
        Store<int64_t>(bytes, i, v);
        break;
      case CommType::kU8:
        Store<uint8_t>(bytes, i, v);
        break;
    }
  }
  return bytes;
}

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;  // why this rank has no CUDA backend
    StatusOr<std::unique_ptr<ops::Backend>> backend =
        ops::CreateBackend({.device = ops::Device::kCuda, .device_index = LocalRank()});
    if (backend.ok()) {
      backend_ = std::move(backend).value();
    } else {
      why = backend.status().ToString();
    }
    // Every rank skips, or none: a rank alone in a collective would wait out its timeout.
    int64_t missing = why.empty() ? 0 : 1;
    ASSERT_TRUE(World().AllReduce(&missing, 1, CommType::kI64, ReduceOp::kMax).ok());
    if (missing != 0) {
      if (why.empty()) why = "another rank has no CUDA backend";
      const char* require = std::getenv("FULLBAND_REQUIRE_CUDA");
      if (require != nullptr && std::string(require) == "1") {
        FAIL() << "FULLBAND_REQUIRE_CUDA=1 and no CUDA backend: " << why;
      }
      GTEST_SKIP() << "no CUDA backend here (" << why << "): the NCCL communicator is not run";
    }
    StatusOr<std::unique_ptr<Communicator>> nccl = ops::CreateNcclCommunicator(World(), *backend_);
    ASSERT_TRUE(nccl.ok()) << nccl.status().ToString();
    nccl_ = std::move(nccl).value();
    ASSERT_EQ(nccl_->name(), "nccl");
    ASSERT_EQ(nccl_->rank(), World().rank());
    ASSERT_EQ(nccl_->size(), World().size());
  }

  void TearDown() override {
    nccl_.reset();
    if (backend_ == nullptr) return;
    backend_->Synchronize();
    for (void* ptr : device_) backend_->Free(ptr);
    device_.clear();
    backend_.reset();
  }

  void* DeviceBuffer(size_t bytes) {
    StatusOr<void*> ptr = backend_->Allocate(bytes);
    EXPECT_TRUE(ptr.ok()) << ptr.status().ToString();
    if (!ptr.ok()) return nullptr;
    device_.push_back(*ptr);
    return *ptr;
  }
  void* ToDevice(const Bytes& host) {
    void* ptr = DeviceBuffer(host.size());
    backend_->CopyFromHost(ptr, host.data(), host.size());
    return ptr;
  }
  Bytes ToHost(const void* ptr, size_t bytes) {
    Bytes host(bytes);
    backend_->CopyToHost(host.data(), ptr, bytes);
    return host;
  }

  int rank() const { return World().rank(); }
  int size() const { return World().size(); }

  std::unique_ptr<ops::Backend> backend_;
  std::unique_ptr<Communicator> nccl_;
  std::vector<void*> device_;
};

TEST(NcclCommunicatorCreate, CpuBackend_IsFailedPreconditionOnEveryRank) {
  StatusOr<std::unique_ptr<ops::Backend>> cpu =
      ops::CreateBackend({.device = ops::Device::kCpu, .num_threads = 1});
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  StatusOr<std::unique_ptr<Communicator>> nccl = ops::CreateNcclCommunicator(World(), **cpu);
  ASSERT_FALSE(nccl.ok());
  EXPECT_EQ(nccl.status().code(), StatusCode::kFailedPrecondition) << nccl.status().ToString();
  EXPECT_NE(nccl.status().message().find("needs a CUDA backend"), std::string::npos)
      << nccl.status().ToString();
}

TEST_F(NcclCommunicatorTest, AllReduce_EveryTypeAndOp_MatchesBootstrapGroup) {
  for (CommType type : kTypes) {
    for (ReduceOp op : kOps) {
      for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{100003}}) {
        SCOPED_TRACE(Describe(type, op, count));
        Bytes want = Values(type, count, rank(), 1);
        void* data = ToDevice(want);
        ASSERT_TRUE(nccl_->AllReduce(data, count, type, op).ok());
        ASSERT_TRUE(World().AllReduce(want.data(), count, type, op).ok());
        EXPECT_EQ(ToHost(data, want.size()), want);
      }
    }
  }
}

TEST_F(NcclCommunicatorTest, AllReduce_UnroundedFloats_SameBitsOnEveryRank) {
  const int64_t count = 4099;
  std::mt19937 rng(1234 + rank());
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> want(count);
  for (float& x : want) x = uniform(rng);
  Bytes host(count * sizeof(float));
  std::memcpy(host.data(), want.data(), host.size());
  void* data = ToDevice(host);
  ASSERT_TRUE(nccl_->AllReduce(data, count, CommType::kF32, ReduceOp::kSum).ok());
  ASSERT_TRUE(World().AllReduce(want.data(), count, CommType::kF32, ReduceOp::kSum).ok());
  const Bytes got = ToHost(data, host.size());
  Bytes every(got.size() * size());
  ASSERT_TRUE(World().AllGather(got.data(), every.data(), got.size(), CommType::kU8).ok());
  for (int r = 0; r < size(); ++r) {
    EXPECT_EQ(std::memcmp(every.data() + r * got.size(), got.data(), got.size()), 0)
        << "rank " << r << "'s sum differs from rank " << rank() << "'s";
  }
  std::vector<float> sums(count);
  std::memcpy(sums.data(), got.data(), got.size());
  for (int64_t i = 0; i < count; ++i) {
    // Two addends round the same in either order; more may not (nccl_communicator.h).
    if (size() <= 2) {
      ASSERT_EQ(sums[i], want[i]) << "element " << i;
    } else {
      ASSERT_NEAR(sums[i], want[i], 1e-5f * size()) << "element " << i;
    }
  }
}

TEST_F(NcclCommunicatorTest, ReduceScatter_EveryTypeAndOp_MatchesBootstrapGroup) {
  for (CommType type : kTypes) {
    for (ReduceOp op : kOps) {
      for (int64_t count : {int64_t{1}, int64_t{5}, int64_t{33333}}) {
        SCOPED_TRACE(Describe(type, op, count));
        const Bytes in = Values(type, count * size(), rank(), 2);
        const size_t out_bytes = static_cast<size_t>(count) * CommTypeSize(type);
        void* in_device = ToDevice(in);
        void* out_device = DeviceBuffer(out_bytes);
        ASSERT_TRUE(nccl_->ReduceScatter(in_device, out_device, count, type, op).ok());
        Bytes want(out_bytes);
        ASSERT_TRUE(World().ReduceScatter(in.data(), want.data(), count, type, op).ok());
        EXPECT_EQ(ToHost(out_device, out_bytes), want);
      }
    }
  }
}

TEST_F(NcclCommunicatorTest, AllGather_EveryType_MatchesBootstrapGroup) {
  for (CommType type : kTypes) {
    for (int64_t count : {int64_t{1}, int64_t{5}, int64_t{33333}}) {
      SCOPED_TRACE(Describe(type, ReduceOp::kSum, count));
      const Bytes in = Values(type, count, rank(), 3);
      const size_t out_bytes = in.size() * size();
      void* in_device = ToDevice(in);
      void* out_device = DeviceBuffer(out_bytes);
      ASSERT_TRUE(nccl_->AllGather(in_device, out_device, count, type).ok());
      Bytes want(out_bytes);
      ASSERT_TRUE(World().AllGather(in.data(), want.data(), count, type).ok());
      EXPECT_EQ(ToHost(out_device, out_bytes), want);
    }
  }
}

TEST_F(NcclCommunicatorTest, Broadcast_FromEveryRoot_MatchesBootstrapGroup) {
  for (int root = 0; root < size(); ++root) {
    for (int64_t bytes : {int64_t{1}, int64_t{1000}, int64_t{(1 << 20) + 3}}) {
      SCOPED_TRACE("root " + std::to_string(root) + ", bytes " + std::to_string(bytes));
      Bytes want = Values(CommType::kU8, bytes, rank(), 4);
      void* data = ToDevice(want);
      ASSERT_TRUE(nccl_->Broadcast(data, bytes, root).ok());
      ASSERT_TRUE(World().Broadcast(want.data(), bytes, root).ok());
      EXPECT_EQ(ToHost(data, want.size()), want);
    }
  }
}

// Several collectives in flight at once, then a barrier, complete, each with its own buffer.
TEST_F(NcclCommunicatorTest, ManyInFlight_ThenBarrier_Complete) {
  std::vector<Bytes> want;
  std::vector<void*> data;
  std::vector<std::unique_ptr<Work>> works;
  for (int b = 0; b < 6; ++b) {
    want.push_back(Values(CommType::kF32, 1000, rank(), 10 + b));
    data.push_back(ToDevice(want.back()));
    works.push_back(nccl_->AllReduceAsync(data.back(), 1000, CommType::kF32, ReduceOp::kSum));
  }
  works.push_back(nccl_->BarrierAsync());
  for (auto& work : works) ASSERT_TRUE(work->Wait(std::chrono::seconds(60)).ok());
  for (int b = 0; b < 6; ++b) {
    ASSERT_TRUE(World().AllReduce(want[b].data(), 1000, CommType::kF32, ReduceOp::kSum).ok());
    EXPECT_EQ(ToHost(data[b], want[b].size()), want[b]) << "buffer " << b;
  }
  ASSERT_TRUE(nccl_->Barrier().ok());
}

// The same collectives on the NCCL group (device buffers) and on the bootstrap group (host
// buffers) add the same bytes to traffic().
TEST_F(NcclCommunicatorTest, Traffic_CountsLikeBootstrapGroup) {
  const int n = size();
  Bytes host(4096 * n), host_out(4096 * n);
  void* device = ToDevice(host);
  void* device_out = ToDevice(host_out);
  const Communicator::Traffic nccl_before = nccl_->traffic();
  const Communicator::Traffic ref_before = World().traffic();
  for (auto [comm, in, out] :
       {std::tuple<Communicator*, void*, void*>{nccl_.get(), device, device_out},
        {&World(), host.data(), host_out.data()}}) {
    ASSERT_TRUE(comm->AllReduce(in, 10, CommType::kF32, ReduceOp::kSum).ok());
    ASSERT_TRUE(comm->ReduceScatter(in, out, 3, CommType::kF64, ReduceOp::kMax).ok());
    ASSERT_TRUE(comm->AllGather(in, out, 5, CommType::kI64).ok());
    ASSERT_TRUE(comm->Broadcast(in, 17, 0).ok());
    ASSERT_TRUE(comm->Barrier().ok());
  }
  const Communicator::Traffic& nccl = nccl_->traffic();
  const Communicator::Traffic& ref = World().traffic();
  EXPECT_EQ(nccl.all_reduce - nccl_before.all_reduce, ref.all_reduce - ref_before.all_reduce);
  EXPECT_EQ(nccl.reduce_scatter - nccl_before.reduce_scatter,
            ref.reduce_scatter - ref_before.reduce_scatter);
  EXPECT_EQ(nccl.all_gather - nccl_before.all_gather, ref.all_gather - ref_before.all_gather);
  EXPECT_EQ(nccl.broadcast - nccl_before.broadcast, ref.broadcast - ref_before.broadcast);
  EXPECT_EQ(nccl.collectives - nccl_before.collectives, ref.collectives - ref_before.collectives);
  EXPECT_EQ(nccl.all_reduce - nccl_before.all_reduce, 40);
  EXPECT_EQ(nccl.reduce_scatter - nccl_before.reduce_scatter, 24 * n);
}

// Wait(0) asks whether a collective is done: behind tens of milliseconds of GEMMs on the
// backend's stream it is not (DEADLINE_EXCEEDED), and a later Wait gets it.
TEST_F(NcclCommunicatorTest, Wait_BehindLongKernels_IsDeadlineExceededThenCompletes) {
  const int64_t count = 1000;
  Bytes want = Values(CommType::kF32, count, rank(), 5);
  void* data = ToDevice(want);
  // Once first, so that NCCL's connections for it are set up before the timed one.
  ASSERT_TRUE(nccl_->Barrier().ok());
  ASSERT_TRUE(World().AllReduce(want.data(), count, CommType::kF32, ReduceOp::kSum).ok());
  ASSERT_TRUE(nccl_->AllReduce(data, count, CommType::kF32, ReduceOp::kSum).ok());
  const int64_t n = 4096;  // each product about 137 GFLOP
  const Bytes zeros(n * n * sizeof(float));
  const float* a = static_cast<const float*>(ToDevice(zeros));
  float* c = static_cast<float*>(DeviceBuffer(zeros.size()));
  for (int i = 0; i < 20; ++i) backend_->Gemm(false, false, n, n, n, 1.0f, a, n, a, n, 0.0f, c, n);
  std::unique_ptr<Work> work = nccl_->AllReduceAsync(data, count, CommType::kF32, ReduceOp::kSum);
  const Status early = work->Wait(std::chrono::milliseconds(0));
  EXPECT_EQ(early.code(), StatusCode::kDeadlineExceeded) << early.ToString();
  ASSERT_TRUE(work->Wait(std::chrono::seconds(60)).ok());
  ASSERT_TRUE(World().AllReduce(want.data(), count, CommType::kF32, ReduceOp::kSum).ok());
  EXPECT_EQ(ToHost(data, want.size()), want);
}

// Split(color, key) makes the groups MPI_Comm_split would: the same ranks, in key order.
TEST_F(NcclCommunicatorTest, Split_MatchesBootstrapSplit) {
  const int n = size(), me = rank();
  for (auto [color, key] : {std::pair{0, n - 1 - me}, std::pair{me % 2, me}}) {
    SCOPED_TRACE("color " + std::to_string(color) + ", key " + std::to_string(key));
    StatusOr<std::unique_ptr<Communicator>> child = nccl_->Split(color, key);
    ASSERT_TRUE(child.ok()) << child.status().ToString();
    StatusOr<std::unique_ptr<Communicator>> ref = World().Split(color, key);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    EXPECT_EQ((*child)->name(), "nccl");
    ASSERT_EQ((*child)->size(), (*ref)->size());
    ASSERT_EQ((*child)->rank(), (*ref)->rank());
    const int64_t mine = me;
    Bytes in(sizeof(mine));
    std::memcpy(in.data(), &mine, sizeof(mine));
    const size_t out_bytes = sizeof(mine) * (*ref)->size();
    void* in_device = ToDevice(in);
    void* out_device = DeviceBuffer(out_bytes);
    ASSERT_TRUE((*child)->AllGather(in_device, out_device, 1, CommType::kI64).ok());
    Bytes want(out_bytes);
    ASSERT_TRUE((*ref)->AllGather(in.data(), want.data(), 1, CommType::kI64).ok());
    EXPECT_EQ(ToHost(out_device, out_bytes), want);
  }
}

}  // namespace
}  // namespace fullband::comm

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  fullband::StatusOr<fullband::comm::ProcessGroup> group = fullband::comm::JoinProcessGroup();
  if (!group.ok()) {
    std::fprintf(stderr, "%s\n", group.status().ToString().c_str());
    return 1;
  }
  group->world->set_timeout(std::chrono::seconds(60));
  fullband::comm::g_world = group->world.get();
  return RUN_ALL_TESTS();
}
