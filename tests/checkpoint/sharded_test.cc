// Sharded checkpoints: the manifest's round trip and checks, reading any slice back from shards
// written at other layouts (data-parallel ranges, tensor-parallel row and column boxes, both),
// the commit protocol's directories, and every corruption named.
#include "checkpoint/sharded.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>

#include "common/file_util.h"
#include "tests/common/fault_file_system.h"
#include "tests/common/temp_dir.h"

namespace fullband::checkpoint {
namespace {

namespace fs = std::filesystem;

// A tensor of shape (6, 10) holding 0, 1, 2, ... and a vector of 7.
const std::vector<int64_t> kMatrix = {6, 10};
const std::vector<int64_t> kVector = {7};

std::vector<float> Iota(int64_t n, float start) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

// The elements `s` names, in its order, of a row-major tensor of `shape` holding `all`.
std::vector<float> Expected(const std::vector<float>& all, const std::vector<int64_t>& shape,
                            const TensorSlice& s) {
  std::vector<float> out;
  const int64_t cols = shape.size() == 2 ? shape[1] : 1;
  const int64_t box_cols = s.shape.size() == 2 ? s.shape[1] : 1;
  for (int64_t i = s.begin; i < s.end; ++i) {
    const int64_t r = i / box_cols, c = i % box_cols;
    const int64_t g =
        shape.size() == 2 ? (s.offset[0] + r) * cols + s.offset[1] + c : s.offset[0] + i;
    out.push_back(all[static_cast<size_t>(g)]);
  }
  return out;
}

TensorSlice Box(std::vector<int64_t> offset, std::vector<int64_t> shape, int64_t begin = 0,
                int64_t end = -1) {
  TensorSlice s;
  s.offset = std::move(offset);
  s.shape = std::move(shape);
  s.begin = begin;
  s.end = end < 0 ? NumElements(s.shape) : end;
  return s;
}

TrainingState SomeState(int64_t step) {
  TrainingState s;
  s.step = step;
  s.total_steps = 100;
  s.next_passes = 2;
  s.tokens = 4096;
  s.token_equivalents = 6144;
  s.optimizer_step = step;
  s.data_seed = 18446744073709551557ull;  // > 2^63: kept exactly
  s.next_step_seed = 12345;
  s.sampler_draws = 64;
  s.sources = {{"/data/a", 40}, {"/data/b", 24}};
  s.tokenizer_hash = "abc123";
  s.config_yaml = "model: {d_model: 32}\n";
  s.tp = 2;
  s.dp = 3;
  s.zero1 = true;
  return s;
}

class ShardedTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = fullband::testing::MakeTempDir("fullband_ck_"); }
  void TearDown() override { fs::remove_all(root_); }

  // Writes a checkpoint of `step` under `root` through `file_system` (null: POSIX) in which rank r
  // holds pieces[r] of the matrix (and rank 0 the whole vector); returns its directory.
  StatusOr<std::string> TrySave(const std::string& root, int64_t step,
                                const std::vector<std::vector<TensorSlice>>& pieces,
                                rocksdb::FileSystem* file_system = nullptr) {
    const std::string temp = root + "/" + TempDirName(step, "t");
    for (size_t r = 0; r < pieces.size(); ++r) {
      std::vector<std::vector<float>> keep;
      std::vector<PieceRef> refs;
      for (const TensorSlice& s : pieces[r]) {
        keep.push_back(Expected(matrix_, kMatrix, s));
        refs.push_back({"m", kMatrix, s, keep.back().data()});
      }
      if (r == 0) refs.push_back({"v", kVector, WholeTensor(kVector), vector_.data()});
      FB_RETURN_IF_ERROR(WriteShard(temp, static_cast<int>(r), refs, file_system).status());
    }
    return CommitShards(root, temp, static_cast<int>(pieces.size()), SomeState(step),
                        {{"m", {StDType::kF32, kMatrix}}, {"v", {StDType::kF32, kVector}}},
                        file_system);
  }
  std::string Save(int64_t step, const std::vector<std::vector<TensorSlice>>& pieces) {
    StatusOr<std::string> path = TrySave(root_, step, pieces);
    EXPECT_TRUE(path.ok()) << path.status().ToString();
    return path.ok() ? *path : "";
  }

  // Reads `want` of the matrix from `dir`; expects exactly those elements.
  void ExpectReads(const std::string& dir, const TensorSlice& want) {
    StatusOr<std::unique_ptr<CheckpointReader>> r = CheckpointReader::Open(dir);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::vector<float> got(static_cast<size_t>(want.numel()), -1.0f);
    ASSERT_TRUE((*r)->Read("m", want, got.data()).ok());
    EXPECT_EQ(got, Expected(matrix_, kMatrix, want));
  }

  void FlipByte(const std::string& path, uint64_t at) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    const char c = static_cast<char>(f.get() ^ 0x10);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(c);
  }

  std::string root_;
  std::vector<float> matrix_ = Iota(60, 0.5f);
  std::vector<float> vector_ = Iota(7, -3.0f);
};

TEST(ManifestTest, RoundTrip_PreservesEveryField) {
  Manifest m;
  m.state = SomeState(42);
  m.tensors["m"] = {StDType::kF32, kMatrix};
  m.tensors["v"] = {StDType::kF32, kVector};
  m.files.push_back(
      {"rank-00000.safetensors",
       0,
       1000,
       0xfedcba9876543210ull,
       120,
       7,
       {{"m", Box({0, 0}, {6, 10}, 3, 30), 0x0123456789abcdefull}, {"v", Box({0}, {7}), 1}}});
  m.files.push_back(
      {"rank-00001.safetensors",
       1,
       2000,
       2,
       64,
       3,
       {{"m", Box({0, 0}, {6, 10}, 30, 60), 9}, {"m", Box({0, 0}, {6, 10}, 0, 3), 8}}});
  StatusOr<Manifest> back = Manifest::Parse(m.ToJson(), "m.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, m);
  EXPECT_NE(m.ToJson().find("\"strides\""), std::string::npos);
}

TEST(ManifestTest, Parse_NamesTheBadField) {
  Manifest m;
  m.state = SomeState(1);
  m.tensors["m"] = {StDType::kF32, kMatrix};
  m.files.push_back({"rank-00000.safetensors", 0, 10, 1, 8, 1, {{"m", Box({0, 0}, kMatrix), 1}}});
  const nlohmann::json good = nlohmann::json::parse(m.ToJson());
  // Parses `good` changed by `edit`; expects DATA_LOSS and returns the message.
  const auto error = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = good;
    edit(j);
    StatusOr<Manifest> r = Manifest::Parse(j.dump(), "dir/manifest.json");
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << j.dump();
    return r.status().message();
  };
  using J = nlohmann::json;
  EXPECT_NE(error([](J& j) { j["magic"] = "safetensors"; }).find("magic"), std::string::npos);
  EXPECT_NE(error([](J& j) { j["version"] = 9; }).find("version"), std::string::npos);
  EXPECT_NE(error([](J& j) {
              j["ledger"].erase("token_equivalents");
            }).find("ledger.token_equivalents: missing"),
            std::string::npos);
  EXPECT_NE(error([](J& j) { j["rng"]["data_seed"] = "7"; }).find("rng.data_seed"),
            std::string::npos);
  EXPECT_NE(error([](J& j) { j["files"][0]["file"] = "../etc/passwd"; }).find("not a file name"),
            std::string::npos);
  EXPECT_NE(error([](J& j) {
              j["files"][0]["pieces"][0]["range"] = {0, 61};
            }).find("files[0].pieces[0].range"),
            std::string::npos);
  EXPECT_NE(error([](J& j) {
              j["files"][0]["pieces"][0]["offset"] = {1, 0};
            }).find("outside the tensor"),
            std::string::npos);
  EXPECT_NE(error([](J& j) { j["files"][0]["xxh64"] = "zz"; }).find("files[0].xxh64"),
            std::string::npos);
  EXPECT_NE(error([](J& j) { j["files"][0]["pieces"][0]["tensor"] = "w"; }).find("names no tensor"),
            std::string::npos);
  EXPECT_NE(error([](J& j) { j["tensors"]["m"]["dtype"] = "F8"; }).find("unknown dtype"),
            std::string::npos);
  EXPECT_EQ(Manifest::Parse("not json", "x").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(Manifest::Parse("[]", "x").status().code(), StatusCode::kDataLoss);
}

TEST_F(ShardedTest, Read_AnySliceFromAnyLayout) {
  // Data-parallel ranges of the whole tensor (ZeRO-1 shards cut rows), tensor-parallel row
  // boxes, column boxes, and column boxes cut into ranges (TP × DP).
  const std::vector<std::vector<std::vector<TensorSlice>>> layouts = {
      {{Box({0, 0}, kMatrix, 0, 17)}, {Box({0, 0}, kMatrix, 17, 60)}},
      {{Box({0, 0}, {3, 10})}, {Box({3, 0}, {3, 10})}},
      {{Box({0, 0}, {6, 4})}, {Box({0, 4}, {6, 6})}},
      {{Box({0, 0}, {6, 4}, 0, 11)},
       {Box({0, 0}, {6, 4}, 11, 24)},
       {Box({0, 4}, {6, 6}, 0, 5)},
       {Box({0, 4}, {6, 6}, 5, 36)}},
  };
  const std::vector<TensorSlice> wants = {WholeTensor(kMatrix),        Box({0, 0}, kMatrix, 29, 31),
                                          Box({2, 0}, {3, 10}),        Box({0, 5}, {6, 5}),
                                          Box({1, 3}, {4, 6}, 2, 19),  Box({5, 9}, {1, 1}),
                                          Box({0, 0}, kMatrix, 60, 60)};
  int64_t step = 1;
  for (const auto& layout : layouts) {
    const std::string dir = Save(step++, layout);
    for (const TensorSlice& want : wants) ExpectReads(dir, want);
    StatusOr<std::unique_ptr<CheckpointReader>> r = CheckpointReader::Open(dir);
    ASSERT_TRUE(r.ok());
    std::vector<float> v(7);
    ASSERT_TRUE((*r)->Read("v", WholeTensor(kVector), v.data()).ok());
    EXPECT_EQ(v, vector_);
    EXPECT_TRUE((*r)->VerifyFiles().ok());
    EXPECT_EQ((*r)->manifest().state, SomeState(step - 1));
  }
}

TEST_F(ShardedTest, Read_RejectsAbsentTensorsAndSlicesOutside) {
  const std::string dir = Save(3, {{WholeTensor(kMatrix)}});
  StatusOr<std::unique_ptr<CheckpointReader>> r = CheckpointReader::Open(dir);
  ASSERT_TRUE(r.ok());
  std::vector<float> buf(60);
  EXPECT_EQ((*r)->Read("w", WholeTensor(kMatrix), buf.data()).code(), StatusCode::kNotFound);
  EXPECT_EQ((*r)->Read("m", Box({4, 0}, {3, 10}), buf.data()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*r)->Read("m", Box({0, 0}, {6}), buf.data()).code(), StatusCode::kInvalidArgument);
}

TEST_F(ShardedTest, Read_ChecksOnlyThePiecesItReads) {
  const std::string dir = Save(5, {{Box({0, 0}, {3, 10})}, {Box({3, 0}, {3, 10})}});
  // Corrupt rank 1's piece: rows 0..2 still read (only rank 0's piece is read); rows 3..5 fail.
  const std::string shard = dir + "/" + ShardFileName(1);
  FlipByte(shard, fs::file_size(shard) - 4);
  ExpectReads(dir, Box({0, 0}, {3, 10}));
  StatusOr<std::unique_ptr<CheckpointReader>> r = CheckpointReader::Open(dir);
  ASSERT_TRUE(r.ok());
  std::vector<float> buf(60);
  const Status s = (*r)->Read("m", WholeTensor(kMatrix), buf.data());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find(ShardFileName(1)), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("tensor m"), std::string::npos) << s.message();
  EXPECT_EQ((*r)->VerifyFiles().code(), StatusCode::kDataLoss);
}

TEST_F(ShardedTest, Open_NamesTruncatedMissingAndForeignFiles) {
  const std::string dir = Save(7, {{Box({0, 0}, kMatrix, 0, 30)}, {Box({0, 0}, kMatrix, 30, 60)}});
  const std::string shard = dir + "/" + ShardFileName(1);
  fs::resize_file(shard, fs::file_size(shard) - 1);
  Status s = CheckpointReader::Open(dir).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();
  fs::remove(shard);
  s = CheckpointReader::Open(dir).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find(ShardFileName(1) + " is missing"), std::string::npos);
  // A foreign file in the manifest's place, and no directory at all.
  ASSERT_TRUE(WriteFileDurably(dir + "/manifest.json", "{\"hello\": 1}").ok());
  EXPECT_EQ(CheckpointReader::Open(dir).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(CheckpointReader::Open(root_ + "/step-99").status().code(), StatusCode::kNotFound);
}

TEST_F(ShardedTest, Read_DetectsAFlippedHeaderByte) {
  const std::string dir = Save(2, {{WholeTensor(kMatrix)}});
  FlipByte(dir + "/" + ShardFileName(0), 20);  // inside the JSON header
  StatusOr<std::unique_ptr<CheckpointReader>> r = CheckpointReader::Open(dir);
  ASSERT_TRUE(r.ok());
  std::vector<float> buf(60);
  const Status s = (*r)->Read("m", WholeTensor(kMatrix), buf.data());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("header"), std::string::npos) << s.message();
}

TEST_F(ShardedTest, CommitShards_RefusesMissingRecordsAndUncoveredTensors) {
  const std::string temp = root_ + "/" + TempDirName(4, "x");
  const std::vector<float> half = Iota(30, 0);
  ASSERT_TRUE(WriteShard(temp, 0, {{"m", kMatrix, Box({0, 0}, kMatrix, 0, 30), half.data()}}).ok());
  const std::map<std::string, GlobalTensor> tensors = {{"m", {StDType::kF32, kMatrix}}};
  Status s = CommitShards(root_, temp, 2, SomeState(4), tensors).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
  s = CommitShards(root_, temp, 1, SomeState(4), tensors).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("30 elements"), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(root_ + "/step-4"));
}

TEST_F(ShardedTest, ListAndPrune_FollowTheCommitProtocol) {
  for (int64_t step : {10, 20, 30, 40}) Save(step, {{WholeTensor(kMatrix)}});
  // A crash before the rename leaves a temporary directory; one after it but before the
  // coordinator's commit leaves a complete step-50 above the committed 40.
  const std::string partial = root_ + "/" + TempDirName(50, "dead");
  const std::vector<float> m = Iota(60, 0);
  ASSERT_TRUE(WriteShard(partial, 0, {{"m", kMatrix, WholeTensor(kMatrix), m.data()}}).ok());
  Save(50, {{WholeTensor(kMatrix)}});
  const std::string mine = root_ + "/" + TempDirName(60, "live");
  fs::create_directories(mine);
  fs::create_directories(root_ + "/step-70");  // no manifest

  StatusOr<std::vector<CheckpointEntry>> all = ListCheckpoints(root_);
  ASSERT_TRUE(all.ok());
  std::vector<std::pair<int64_t, bool>> seen;
  for (const CheckpointEntry& e : *all) seen.push_back({e.step, e.complete});
  EXPECT_EQ(seen, (std::vector<std::pair<int64_t, bool>>{{10, true},
                                                         {20, true},
                                                         {30, true},
                                                         {40, true},
                                                         {50, false},
                                                         {50, true},
                                                         {60, false},
                                                         {70, false}}));

  ASSERT_TRUE(PruneCheckpoints(root_, 40, 2, "live").ok());
  all = ListCheckpoints(root_);
  ASSERT_TRUE(all.ok());
  std::vector<std::string> left;
  for (const CheckpointEntry& e : *all) left.push_back(fs::path(e.path).filename().string());
  EXPECT_EQ(left, (std::vector<std::string>{"step-30", "step-40", TempDirName(60, "live")}));
  EXPECT_EQ(ListCheckpoints(root_ + "/none").status().code(), StatusCode::kNotFound);
}

TEST_F(ShardedTest, CommitShards_ReplacesAnUncommittedLeftoverOfTheSameStep) {
  matrix_ = Iota(60, 100.0f);
  Save(8, {{WholeTensor(kMatrix)}});
  matrix_ = Iota(60, -7.0f);
  const std::string dir = Save(8, {{Box({0, 0}, kMatrix, 0, 9)}, {Box({0, 0}, kMatrix, 9, 60)}});
  ExpectReads(dir, WholeTensor(kMatrix));
  EXPECT_EQ(ListCheckpoints(root_)->size(), 1u);
}

// A power loss (FaultFileSystem) after every file-system operation of writing and committing a
// checkpoint, in turn: what is left is the previous checkpoint, whole, or — exactly when
// CommitShards returned OK — the new one, whole. The checkpoint root does not exist before the
// first checkpoint, so its own creation is part of what must survive.
TEST_F(ShardedTest, PowerLossAtEveryOperation_LeavesTheOldCheckpointOrTheNewOneWhole) {
  const std::string root = root_ + "/checkpoints";
  const auto faults = std::make_shared<fullband::testing::FaultFileSystem>();
  const std::vector<std::vector<TensorSlice>> two_ranks = {{Box({0, 0}, kMatrix, 0, 25)},
                                                           {Box({0, 0}, kMatrix, 25, 60)}};
  const std::vector<float> old_matrix = Iota(60, 1000.0f), new_matrix = Iota(60, -50.0f);
  int64_t crash_points = 0;
  for (int64_t n = 0;; ++n) {
    fs::remove_all(root);
    faults->ResumeWrites();
    matrix_ = old_matrix;
    ASSERT_TRUE(TrySave(root, 10, {{WholeTensor(kMatrix)}}, faults.get()).ok());
    const int64_t before = faults->operations();
    faults->FailAfter(n);
    matrix_ = new_matrix;
    const bool committed = TrySave(root, 20, two_ranks, faults.get()).ok();
    const int64_t used = faults->operations() - before;
    faults->DropUnsynced();  // the power goes
    faults->ResumeWrites();

    StatusOr<std::vector<CheckpointEntry>> all = ListCheckpoints(root);
    ASSERT_TRUE(all.ok()) << "crash after " << n << " operations: " << all.status().ToString();
    const CheckpointEntry* newest = nullptr;
    for (const CheckpointEntry& e : *all) {
      if (e.complete) newest = &e;
    }
    ASSERT_NE(newest, nullptr) << "crash after " << n << " operations: no checkpoint left";
    EXPECT_EQ(newest->step, committed ? 20 : 10) << "crash after " << n << " operations";
    matrix_ = committed ? new_matrix : old_matrix;
    ExpectReads(newest->path, WholeTensor(kMatrix));
    StatusOr<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::Open(newest->path);
    ASSERT_TRUE(reader.ok());
    EXPECT_TRUE((*reader)->VerifyFiles().ok()) << "crash after " << n << " operations";
    if (committed && used < n) break;  // the commit needed fewer operations than allowed
    ++crash_points;
  }
  EXPECT_GE(crash_points, 15);  // every creation, write, sync and rename of two shards and a commit
}

// A full or failing disk during a save is an INTERNAL error naming the file and the reason; the
// committed checkpoint is untouched and no step directory appears.
TEST_F(ShardedTest, FullOrFailingDisk_IsInternalNamingTheFileAndKeepsTheLastCheckpoint) {
  using Fault = fullband::testing::FaultFileSystem::Fault;
  const auto faults = std::make_shared<fullband::testing::FaultFileSystem>();
  const std::string first = Save(10, {{WholeTensor(kMatrix)}});
  for (const auto& [fault, reason] :
       {std::pair{Fault::kNoSpace, "no space left"}, std::pair{Fault::kIoError, "input/output"}}) {
    faults->FailAfter(3, fault);  // the temporary directory, the shard file, its first bytes
    const StatusOr<std::string> saved = TrySave(root_, 20, {{WholeTensor(kMatrix)}}, faults.get());
    EXPECT_EQ(saved.status().code(), StatusCode::kInternal) << saved.status().ToString();
    EXPECT_NE(saved.status().message().find(ShardFileName(0)), std::string::npos)
        << saved.status().ToString();
    EXPECT_NE(saved.status().message().find(reason), std::string::npos)
        << saved.status().ToString();
    faults->ResumeWrites();
    EXPECT_FALSE(fs::exists(root_ + "/" + StepDirName(20)));
    ExpectReads(first, WholeTensor(kMatrix));
  }
}

}  // namespace
}  // namespace fullband::checkpoint
