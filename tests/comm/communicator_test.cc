// InProcessCommunicator: the Communicator contract on 1 to 4 ranks played by threads, the
// payload accounting, and the timeout when a rank never joins.
#include <gtest/gtest.h>

#include <thread>

#include "comm/in_process_communicator.h"
#include "tests/comm/collective_checks.h"

namespace fullband::comm {
namespace {

// Runs fn(rank's communicator) on one thread per rank; returns their results.
std::vector<std::string> OnEveryRank(int n,
                                     const std::function<std::string(Communicator&)>& fn) {
  std::vector<std::unique_ptr<Communicator>> group =
      InProcessCommunicator::CreateGroup(n);
  std::vector<std::string> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { out[r] = fn(*group[r]); });
  for (auto& t : threads) t.join();
  return out;
}

TEST(InProcessCommunicator, Collectives_KeepTheContractOnOneToFourRanks) {
  for (int n = 1; n <= 4; ++n) {
    for (const std::string& why : OnEveryRank(n, CheckCollectives)) {
      EXPECT_EQ(why, "") << n << " ranks";
    }
  }
}

TEST(InProcessCommunicator, Traffic_CountsEachCollectivesPayload) {
  std::vector<std::unique_ptr<Communicator>> g = InProcessCommunicator::CreateGroup(1);
  std::vector<float> x(10), y(10);
  ASSERT_TRUE(g[0]->AllReduce(x.data(), 10, CommType::kF32, ReduceOp::kSum).ok());
  ASSERT_TRUE(g[0]->AllGather(x.data(), y.data(), 10, CommType::kF32).ok());
  ASSERT_TRUE(g[0]->Broadcast(x.data(), 3, 0).ok());
  EXPECT_EQ(g[0]->traffic().all_reduce, 40);
  EXPECT_EQ(g[0]->traffic().all_gather, 40);
  EXPECT_EQ(g[0]->traffic().broadcast, 3);
  EXPECT_EQ(g[0]->traffic().collectives, 3);
}

TEST(InProcessCommunicator, ARankThatNeverJoins_TimesOutTheOthers) {
  std::vector<std::unique_ptr<Communicator>> g = InProcessCommunicator::CreateGroup(2);
  float x = 1;
  g[0]->set_timeout(std::chrono::milliseconds(50));
  const Status s = g[0]->AllReduce(&x, 1, CommType::kF32, ReduceOp::kSum);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
}

TEST(InProcessCommunicator, MismatchedCollectives_AreAnError) {
  const std::vector<std::string> out = OnEveryRank(2, [](Communicator& c) -> std::string {
    float x[2] = {1, 2};
    return c.AllReduce(x, c.rank() + 1, CommType::kF32, ReduceOp::kSum).ToString();
  });
  for (const std::string& s : out)
    EXPECT_NE(s.find("differs between ranks"), std::string::npos) << s;
}

}  // namespace
}  // namespace fullband::comm
