// EmbeddingForward/Backward against the float64 reference: the forward copies table rows
// exactly; the backward is checked by finite differences and ADDS into dtable (a parameter
// gradient, Note [Gradient accumulation]), with repeated ids summing up.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tests/ops/backend_fixture.h"
#include "tests/ops/reference.h"

namespace fullband::ops::test {
namespace {

// dtable rows sum ≤ 33 float32 terms onto the prefill: ≤ 34·ε ≈ 4e-6 of the largest entry.
constexpr double kBackwardTol = 1e-5;

class EmbeddingTest : public BackendTest {};
FB_INSTANTIATE_BACKEND_TEST_SUITE(EmbeddingTest);

TEST_P(EmbeddingTest, Forward_VariousShapes_CopiesTableRowsExactly) {
  struct Case {
    int64_t n, v, d;
  };
  for (const Case c : {Case{1, 11, 24}, Case{7, 11, 40}, Case{33, 50, 100}, Case{5, 3, 10}}) {
    SCOPED_TRACE(::testing::Message() << "N=" << c.n << " V=" << c.v << " D=" << c.d);
    const std::vector<float> table = Normal(c.v * c.d);
    std::vector<int32_t> ids = RandomIds(c.n, 0, static_cast<int32_t>(c.v));
    ids[0] = static_cast<int32_t>(c.v - 1);  // the last row is reachable
    Tensor out = Nans({c.n, c.d});
    backend().EmbeddingForward(out, Upload(table, {c.v, c.d}), Upload(ids, {c.n}));
    // A pure copy: the reference rows round-trip to float exactly.
    EXPECT_TRUE(BitwiseEqual(Download(out), ToF32(ref::Embedding(ToF64(table), ids, c.d))));
  }
}

TEST_P(EmbeddingTest, Backward_RepeatedIds_AccumulatesIntoPrefilledTableGradient) {
  struct Case {
    int64_t n, v, d;
  };
  for (const Case c : {Case{1, 4, 24}, Case{7, 3, 10}, Case{33, 5, 40}}) {
    SCOPED_TRACE(::testing::Message() << "N=" << c.n << " V=" << c.v << " D=" << c.d);
    std::vector<float> table = Normal(c.v * c.d);
    std::vector<int32_t> ids = RandomIds(c.n, 0, static_cast<int32_t>(c.v));
    if (c.n > 2) ids[1] = ids[2] = ids[0];  // at least one id repeats
    const std::vector<float> dout = Normal(c.n * c.d);
    const std::vector<float> prefill = Normal(c.v * c.d);

    Tensor dtable = Upload(prefill, {c.v, c.d});
    backend().EmbeddingBackward(dtable, Upload(dout, {c.n, c.d}), Upload(ids, {c.n}));

    ref::Vec table64 = ToF64(table);
    const ref::Vec dout64 = ToF64(dout);
    const ref::Vec grad = ref::NumericalGradient(
        [&] { return ref::Dot(dout64, ref::Embedding(table64, ids, c.d)); }, &table64);
    EXPECT_TRUE(NearMax(Download(dtable), Plus(ToF64(prefill), grad), kBackwardTol));
  }
}

// The paper's 1B width (D = 1536) for 2,048 tokens over a vocabulary slice of 8,192 rows (the
// whole 100,352 × 1536 table would be 617 MB), ids reaching its last row, many repeated; and
// ids of another shard (kOtherShard, tensor parallelism) giving zero rows and no gradient.
TEST_P(EmbeddingTest, OneBillionConfigWidth_ForwardAndBackwardMatchReference) {
  const int64_t n = 2048, v = 8192, d = 1536;
  const std::vector<float> table = Normal(v * d), dout = Normal(n * d);
  std::vector<int32_t> ids = RandomIds(n, 0, static_cast<int32_t>(v));
  ids[0] = static_cast<int32_t>(v - 1);
  for (int64_t i = 1; i < n; i += 7) ids[i] = ids[i - 1];  // repeats
  for (int64_t i = 3; i < n; i += 97) ids[i] = kOtherShard;
  Tensor out = Nans({n, d});
  backend().EmbeddingForward(out, Upload(table, {v, d}), Upload(ids, {n}));
  std::vector<float> want(n * d, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] != kOtherShard) std::copy_n(table.begin() + ids[i] * d, d, want.begin() + i * d);
  }
  EXPECT_TRUE(BitwiseEqual(Download(out), want));
  Tensor dtable = Full({v, d}, 0.0f);
  backend().EmbeddingBackward(dtable, Upload(dout, {n, d}), Upload(ids, {n}));
  ref::Vec want_dtable(v * d, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] == kOtherShard) continue;
    for (int64_t j = 0; j < d; ++j) want_dtable[ids[i] * d + j] += dout[i * d + j];
  }
  EXPECT_TRUE(NearMax(Download(dtable), want_dtable, kBackwardTol));
}

TEST_P(EmbeddingTest, Backward_CalledTwice_AddsTwice) {
  const int64_t n = 9, v = 4, d = 24;
  const std::vector<int32_t> ids = {0, 1, 1, 3, 0, 0, 2, 3, 1};
  const std::vector<float> dout = Normal(n * d);
  Tensor dtable = Full({v, d}, 0.0f);
  Tensor tdout = Upload(dout, {n, d});
  Tensor tids = Upload(ids, {n});
  backend().EmbeddingBackward(dtable, tdout, tids);
  backend().EmbeddingBackward(dtable, tdout, tids);

  ref::Vec expected(v * d, 0.0);  // the contract read directly: dtable[ids[r]] += dout[r], twice
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < d; ++j) expected[ids[r] * d + j] += 2.0 * dout[r * d + j];
  }
  EXPECT_TRUE(NearMax(Download(dtable), expected, kBackwardTol));
}

TEST_P(EmbeddingTest, Backward_AllIdsEqual_SumsEveryRowIntoOne) {
  // Many rows hitting one id: the case where parallel scatter-adds race.
  const int64_t n = 257, v = 16, d = 100;
  const std::vector<int32_t> ids(n, 9);
  const std::vector<float> dout = Normal(n * d);
  const std::vector<float> prefill = Normal(v * d);
  Tensor dtable = Upload(prefill, {v, d});
  backend().EmbeddingBackward(dtable, Upload(dout, {n, d}), Upload(ids, {n}));

  ref::Vec expected = ToF64(prefill);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < d; ++j) expected[9 * d + j] += dout[r * d + j];
  }
  // 257 float32 terms per element: random-walk rounding ~√257·ε of the partial sums (≈1e-6
  // of the largest entry); 5e-5 leaves room for any summation order.
  EXPECT_TRUE(NearMax(Download(dtable), expected, 5e-5));
}

}  // namespace
}  // namespace fullband::ops::test
