// backend.h promises that every op checks its views' shapes with FB_CHECK (an abort, not a
// wrong answer). A few representative mismatches on the CPU backend, as death tests; the
// CUDA backend is not forked here (a child process cannot reuse the parent's CUDA context).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "ops/backend.h"
#include "ops/tensor.h"

namespace fullband::ops::test {
namespace {

class ShapeCheckDeathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Re-executes the binary for each death test: safe with the backend's worker threads.
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    StatusOr<std::unique_ptr<Backend>> created = CreateBackend({.device = Device::kCpu});
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    backend_ = std::move(created).value();
  }
  void TearDown() override {
    if (backend_ == nullptr) return;
    for (void* ptr : buffers_) backend_->Free(ptr);
  }

  // A zeroed f32 / i32 host-visible CPU buffer of `shape`.
  Tensor F32(Shape shape) {
    Tensor t = Tensor::F32(static_cast<float*>(Alloc(shape.numel() * 4)), shape);
    backend_->Zero(t);
    return t;
  }
  Tensor I32(Shape shape) {
    Tensor t = Tensor::I32(static_cast<int32_t*>(Alloc(shape.numel() * 4)), shape);
    backend_->Zero(t);
    return t;
  }

  std::unique_ptr<Backend> backend_;

 private:
  void* Alloc(int64_t bytes) {
    StatusOr<void*> ptr = backend_->Allocate(static_cast<size_t>(bytes));
    FB_CHECK(ptr.ok()) << ptr.status().ToString();
    buffers_.push_back(*ptr);
    return *ptr;
  }
  std::vector<void*> buffers_;
};

TEST_F(ShapeCheckDeathTest, RmsNormForward_GainOfWrongLength_Aborts) {
  Tensor out = F32({4, 24}), rstd = F32({4}), x = F32({4, 24}), gain = F32({25});
  EXPECT_DEATH(backend_->RmsNormForward(out, rstd, x, gain, 1e-6f), "gain.numel\\(\\)=25 d=24");
}

TEST_F(ShapeCheckDeathTest, AttentionForward_HeadsNotDivisibleByKvHeads_Aborts) {
  Tensor out = F32({1, 7, 3, 8}), lse = F32({1, 3, 7}), q = F32({1, 7, 3, 8}),
         k = F32({1, 7, 2, 8}), v = F32({1, 7, 2, 8});
  EXPECT_DEATH(backend_->AttentionForward(out, lse, q, k, v, {}), "H 3 Hkv 2");
}

TEST_F(ShapeCheckDeathTest, CrossEntropyForward_TargetsOfWrongLength_Aborts) {
  Tensor loss = F32({5}), lse = F32({5}), logits = F32({5, 40}), targets = I32({6});
  EXPECT_DEATH(backend_->CrossEntropyForward(loss, lse, logits, 40, targets, -1),
               "targets.numel\\(\\) == n");
}

TEST_F(ShapeCheckDeathTest, CrossEntropy_RowPitchBelowV_Aborts) {
  Tensor loss = F32({5}), lse = F32({5}), logits = F32({5, 40}), targets = I32({5});
  EXPECT_DEATH(backend_->CrossEntropyForward(loss, lse, logits, 39, targets, -1), "row pitch");
  EXPECT_DEATH(backend_->CrossEntropyBackward(logits, logits, 39, lse, targets, 1, 0, -1),
               "row pitch");
}

TEST_F(ShapeCheckDeathTest, EmbeddingForward_FloatIds_Aborts) {
  Tensor out = F32({5, 24}), table = F32({10, 24}), ids = F32({5});
  EXPECT_DEATH(backend_->EmbeddingForward(out, table, ids), "tensor is f32, wanted i32");
}

TEST_F(ShapeCheckDeathTest, SwiGluForward_MismatchedShapes_Aborts) {
  Tensor out = F32({7, 40}), gate = F32({7, 40}), up = F32({7, 41});
  EXPECT_DEATH(backend_->SwiGluForward(out, gate, up), "gate.shape == up.shape");
}

}  // namespace
}  // namespace fullband::ops::test
