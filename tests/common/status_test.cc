// Status, StatusOr and the early-return macros.
#include "common/status.h"

#include <gtest/gtest.h>

#include <memory>

namespace fullband {
namespace {

Status FailIfNegative(int x) {
  if (x < 0) return InvalidArgumentError("x = " + std::to_string(x) + " is negative");
  return OkStatus();
}

Status Chain(int x) {
  FB_RETURN_IF_ERROR(FailIfNegative(x));
  return NotFoundError("reached the end");
}

StatusOr<std::unique_ptr<int>> MakeBox(int x) {
  FB_RETURN_IF_ERROR(FailIfNegative(x));
  return std::make_unique<int>(x);
}

StatusOr<int> Unbox(int x) {
  FB_ASSIGN_OR_RETURN(std::unique_ptr<int> box, MakeBox(x));
  return *box + 1;
}

TEST(Status, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(Status, ErrorCarriesCodeAndMessage) {
  Status s = InvalidArgumentError("model.n_heads: 0 must be positive");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ToString(), "INVALID_ARGUMENT: model.n_heads: 0 must be positive");
}

TEST(Status, WithContext_PrefixesErrorsAndKeepsOk) {
  EXPECT_EQ(DataLossError("bad crc").WithContext("store /x").message(), "store /x: bad crc");
  EXPECT_TRUE(OkStatus().WithContext("anything").ok());
}

TEST(Status, ReturnIfError_StopsAtFirstError) {
  EXPECT_EQ(Chain(-1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Chain(1).code(), StatusCode::kNotFound);
}

TEST(StatusOr, AssignOrReturn_MovesValueOrPropagatesError) {
  StatusOr<int> good = Unbox(41);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 42);
  StatusOr<int> bad = Unbox(-2);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "x = -2 is negative");
}

TEST(StatusOrDeathTest, ValueOfError_AbortsWithTheStatus) {
  StatusOr<int> bad = InternalError("boom");
  EXPECT_DEATH((void)bad.value(), "INTERNAL: boom");
}

TEST(CheckDeathTest, FailedCheck_NamesConditionAndContext) {
  int rows = 3;
  EXPECT_DEATH(FB_CHECK_EQ(rows, 4) << "rows of the batch",
               "check failed: \\(rows\\) == \\(4\\) rows=3.*rows of the batch");
}

}  // namespace
}  // namespace fullband
