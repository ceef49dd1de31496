// Checkpoints through the trainer, ranks as threads: 2N steps in one run against N steps, a stop
// and N steps resumed from the checkpoint — every parameter and AdamW moment bitwise, the same
// per-pass losses — at 1 × 1, DP2 and DP2 with ZeRO-1, with K = 1, 2, 3 and two blended token
// stores; a checkpoint written at one layout loads at another (reshard); a corrupt newest
// checkpoint falls back to the one before; one of another model is refused. And the trainer's
// side of the stores: a corrupt record reaching it ends the run with DATA_LOSS naming it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "checkpoint/sharded.h"
#include "comm/in_process_communicator.h"
#include "dataloader/token_store.h"
#include "tests/common/test_configs.h"
#include "tests/dataloader/raw_store.h"
#include "worker/trainer.h"

namespace fullband::worker {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kHalf = 4;  // N

// A token store of `n` random records of 25 tokens (ids < 250, some EOD 256).
std::string MakeStore(const std::string& path, uint32_t seed, size_t n) {
  fs::remove_all(path);
  std::mt19937 rng(seed);
  std::vector<uint32_t> ids(n * 25);
  for (uint32_t& id : ids) id = rng() % 40 == 0 ? 256 : rng() % 250;
  auto w = dataloader::TokenStoreWriter::Open(path, {"test", "-", 260, 24}, "{}");
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_TRUE((*w)->Append(ids).ok());
  dataloader::StoreSource src{
      path, ids.size(), std::to_string(seed), 1, static_cast<int64_t>(ids.size()), 0};
  EXPECT_TRUE((*w)->Commit({}, {src}).ok());
  EXPECT_TRUE((*w)->Close().ok());
  return path;
}

class CheckpointResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/ckpt_resume_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    a_ = MakeStore(dir_ + "/a.store", 1, 300);
    b_ = MakeStore(dir_ + "/b.store", 2, 200);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Config MakeConfig(int dp, bool zero1, const std::string& ckpt, int tp = 1) const {
    Config c;
    c.model = TinyTestModel();
    c.parallel.tp = tp;
    c.parallel.dp = dp;
    c.parallel.zero1 = zero1;
    c.data.sources = {{a_, 0.7}, {b_, 0.3}};
    c.data.batch_size = 8;
    c.data.seq_len = 24;
    c.optim.warmup_steps = 2;
    c.schedule.steps = 2 * kHalf;
    c.schedule.phases = {{1.0, {{1, 0.34}, {2, 0.33}, {3, 0.33}}}};
    c.checkpoint.dir = ckpt;
    c.checkpoint.every_steps = kHalf;
    c.checkpoint.keep = 0;
    c.runtime.threads = 1;
    c.runtime.peak_gflops = 1;
    return c;
  }

  struct Run {
    std::string error;
    std::vector<std::vector<double>> losses;  // rank 0's, per step
    std::vector<int64_t> passes;
    // In memory at the end of a run stopped early: rank 0's parameters, and the second AdamW
    // moment of the whole arena, each rank's range placed at its offset (ZeRO-1 shards it).
    std::vector<float> params, moment_v;
    int64_t v_begin = 0;  // this rank's range of moment_v (before the ranks' are joined)
    std::vector<std::vector<float>> rank_params;  // every rank's parameters (TP: its share)
  };

  // Runs `config` as tp × dp threads: from scratch (or from `resume`), stopping after
  // `stop_after` steps of this run (-1: to the end) as if the budget were spent there.
  Run Train(const Config& config, const std::string& resume, int64_t stop_after = -1) {
    const int world = static_cast<int>(config.parallel.tp * config.parallel.dp);
    std::vector<std::unique_ptr<comm::Communicator>> group =
        comm::InProcessCommunicator::CreateGroup(world);
    std::vector<Run> runs(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        StatusOr<TrainSummary> s = TrainUntil(config, group[r].get(), resume, stop_after, &runs[r]);
        if (!s.ok()) runs[r].error = s.status().ToString();
      });
    }
    for (auto& t : threads) t.join();
    for (const Run& r : runs) {
      if (!r.error.empty()) return r;
    }
    Run out = runs[0];
    for (const Run& r : runs) out.rank_params.push_back(r.params);
    if (!out.params.empty() && config.parallel.tp == 1) {  // join the ranks' moment ranges
      out.moment_v.assign(out.params.size(), 0.0f);
      for (const Run& r : runs) {
        std::copy(r.moment_v.begin(), r.moment_v.end(), out.moment_v.begin() + r.v_begin);
      }
    }
    return out;
  }

  // The shard files of `dir`, byte for byte, by name.
  static std::map<std::string, std::string> Shards(const std::string& dir) {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (!name.ends_with(".safetensors")) continue;
      std::ifstream in(e.path(), std::ios::binary);
      out[name] = std::string(std::istreambuf_iterator<char>(in), {});
    }
    return out;
  }

  // Trains `config` from checkpoint `from` to the end: its steps' losses must be those of the
  // one-rank run `alone` (which ran every step) within 1e-5.
  void ExpectRestLikeAlone(const Run& alone, const Config& config, const std::string& from) {
    SCOPED_TRACE(from + " at tp " + std::to_string(config.parallel.tp) + " × dp " +
                 std::to_string(config.parallel.dp));
    const Run r = Train(config, from);
    ASSERT_EQ(r.error, "");
    ASSERT_EQ(r.losses.size(), static_cast<size_t>(kHalf));
    for (size_t s = 0; s < r.losses.size(); ++s) {
      const std::vector<double>& want = alone.losses[kHalf + s];
      ASSERT_EQ(r.losses[s].size(), want.size());
      for (size_t k = 0; k < want.size(); ++k) {
        EXPECT_NEAR(r.losses[s][k], want[k], 1e-5 * std::abs(want[k]))
            << "step " << kHalf + s << " pass " << k + 1;
      }
    }
  }

  // A one-rank trainer of the fixture's model with checkpoint `path` restored.
  struct OneRank {
    std::vector<std::unique_ptr<comm::Communicator>> group =
        comm::InProcessCommunicator::CreateGroup(1);
    std::unique_ptr<ops::Backend> backend;
    std::unique_ptr<Trainer> trainer;
  };
  std::unique_ptr<OneRank> RestoredAtOneRank(const std::string& path) const {
    const Config c = MakeConfig(1, false, "");
    auto one = std::make_unique<OneRank>();
    one->backend = CreateRuntimeBackend(c.runtime).value();
    one->trainer = Trainer::Create(c, one->backend.get(), one->group[0].get()).value();
    const StatusOr<Trainer::Restored> r = one->trainer->Restore(path);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return one;
  }

  std::string dir_, a_, b_;

 private:
  // A local plan that ends early with an empty stop reason (the final save runs).
  class StopAfter final : public StepSource {
   public:
    StopAfter(StepPlan plan, int64_t first, int64_t count)
        : inner_(plan, first), total_(plan.total_steps()), left_(count) {}
    StatusOr<std::optional<StepAssignment>> Next() override {
      if (left_ == 0) return std::optional<StepAssignment>();
      --left_;
      return inner_.Next();
    }
    Status Done(const StepAssignment&, const std::vector<double>&, double) override {
      return OkStatus();
    }
    Status Commit(int64_t, const std::string&, int64_t) override { return OkStatus(); }
    int64_t total_steps() const override { return total_; }

   private:
    LocalStepSource inner_;
    int64_t total_, left_;
  };

  StatusOr<TrainSummary> TrainUntil(const Config& c, comm::Communicator* comm,
                                    const std::string& resume, int64_t stop_after, Run* out) {
    if (stop_after < 0) {
      return TrainLocal(
          c, comm,
          [&](const StepRecord& r) {
            out->losses.push_back(r.pass_loss);
            out->passes.push_back(r.passes);
          },
          resume);
    }
    FB_ASSIGN_OR_RETURN(std::unique_ptr<ops::Backend> be, CreateRuntimeBackend(c.runtime));
    FB_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> t,
                        Trainer::Create(c, be.get(), comm, c.checkpoint.dir));
    FB_ASSIGN_OR_RETURN(std::unique_ptr<BatchSource> data,
                        BatchSource::Open(c, t->layout().dp_rank, t->layout().dp, 0));
    FB_ASSIGN_OR_RETURN(StepPlan plan, StepPlan::Create(c));
    StopAfter steps(std::move(plan), 0, stop_after);
    StatusOr<TrainSummary> summary = t->Run(steps, *data, [&](const StepRecord& r) {
      out->losses.push_back(r.pass_loss);
      out->passes.push_back(r.passes);
    });
    const ops::Tensor p = t->model().params(), v = t->optimizer().v();
    out->params.assign(p.f32(), p.f32() + p.numel());
    out->moment_v.assign(v.f32(), v.f32() + v.numel());
    out->v_begin = t->optimizer().begin();
    return summary;
  }
};

TEST_F(CheckpointResumeTest, OneRank_ResumesBitwise) {
  const std::string whole = dir_ + "/whole", split = dir_ + "/split";
  const Run full = Train(MakeConfig(1, false, whole), "");
  ASSERT_EQ(full.error, "");
  const Run first = Train(MakeConfig(1, false, split), "", kHalf);
  ASSERT_EQ(first.error, "");
  const Run second = Train(MakeConfig(1, false, split), split + "/step-4");
  ASSERT_EQ(second.error, "");
  // The same losses, pass for pass, and the same parameters and moments, bit for bit.
  ASSERT_EQ(first.losses.size() + second.losses.size(), full.losses.size());
  std::vector<std::vector<double>> joined = first.losses;
  joined.insert(joined.end(), second.losses.begin(), second.losses.end());
  EXPECT_EQ(joined, full.losses);
  std::set<int64_t> ks(full.passes.begin(), full.passes.end());
  EXPECT_EQ(ks, (std::set<int64_t>{1, 2, 3}));
  EXPECT_EQ(Shards(split + "/step-8"), Shards(whole + "/step-8"));
  // The training state, too (sampler cursors of both stores, ledger, seeds); the configs
  // differ in checkpoint.dir only.
  auto state = [](const std::string& d) {
    checkpoint::TrainingState s = (*checkpoint::CheckpointReader::Open(d))->manifest().state;
    s.config_yaml.clear();
    return s;
  };
  EXPECT_EQ(state(split + "/step-8"), state(whole + "/step-8"));
  EXPECT_EQ(state(whole + "/step-8").sources.size(), 2u);
  EXPECT_EQ(state(whole + "/step-8").tokens, 8 * 8 * 24);
}

TEST_F(CheckpointResumeTest, DataAndTensorParallel_WithAndWithoutZero1_ResumeBitwise) {
  struct Layout {
    int tp, dp;
    bool zero1;
  };
  for (const Layout& l :
       {Layout{1, 2, false}, Layout{1, 2, true}, Layout{2, 1, false}, Layout{2, 2, true}}) {
    const std::string tag =
        "tp" + std::to_string(l.tp) + "dp" + std::to_string(l.dp) + (l.zero1 ? "-zero1" : "");
    const std::string whole = dir_ + "/whole-" + tag, split = dir_ + "/split-" + tag;
    const Run full = Train(MakeConfig(l.dp, l.zero1, whole, l.tp), "");
    ASSERT_EQ(full.error, "") << tag;
    ASSERT_EQ(Train(MakeConfig(l.dp, l.zero1, split, l.tp), "", kHalf).error, "") << tag;
    const Run second = Train(MakeConfig(l.dp, l.zero1, split, l.tp), split);  // the newest
    ASSERT_EQ(second.error, "") << tag;
    EXPECT_EQ(std::vector<std::vector<double>>(full.losses.begin() + kHalf, full.losses.end()),
              second.losses)
        << tag;
    const auto shards = Shards(whole + "/step-8");
    EXPECT_EQ(shards.size(), static_cast<size_t>(l.tp * l.dp)) << tag;
    EXPECT_EQ(Shards(split + "/step-8"), shards) << tag;
  }
}

TEST_F(CheckpointResumeTest, Reshard_DP2Zero1ToOneRankAndBack) {
  const std::string one = dir_ + "/one", z = dir_ + "/z";
  const Run alone = Train(MakeConfig(1, false, one), "");
  ASSERT_EQ(alone.error, "");
  const Run saved = Train(MakeConfig(2, true, z), "", kHalf);
  ASSERT_EQ(saved.error, "");
  // DP2 + ZeRO-1's step-4 at one rank, and one rank's step-4 at DP2 + ZeRO-1: the next steps'
  // losses agree with the one-rank run's within 1e-5.
  ExpectRestLikeAlone(alone, MakeConfig(1, false, dir_ + "/r1"), z + "/step-4");
  ExpectRestLikeAlone(alone, MakeConfig(2, true, dir_ + "/r2"), one + "/step-4");
  // Loaded at one rank, the parameters and moments are bit for bit what the DP2 + ZeRO-1 group
  // held in memory when it saved them.
  const std::unique_ptr<OneRank> loaded = RestoredAtOneRank(z + "/step-4");
  Trainer* t = loaded->trainer.get();
  for (const model::ParamSpec& spec : t->model().table().specs()) {
    const auto held = [&](const std::vector<float>& arena) {
      return std::vector<float>(arena.begin() + spec.offset,
                                arena.begin() + spec.offset + spec.numel);
    };
    const float* p = t->model().params().f32() + spec.offset;
    EXPECT_EQ(std::vector<float>(p, p + spec.numel), held(saved.params)) << spec.name;
    const float* v = t->optimizer().v().f32() + spec.offset;
    EXPECT_EQ(std::vector<float>(v, v + spec.numel), held(saved.moment_v)) << spec.name;
  }
}

TEST_F(CheckpointResumeTest, Reshard_TensorParallelToOtherLayouts) {
  const std::string one = dir_ + "/one", tp = dir_ + "/tp";
  const Run alone = Train(MakeConfig(1, false, one), "");
  ASSERT_EQ(alone.error, "");
  const Run saved = Train(MakeConfig(2, true, tp, /*tp=*/2), "", kHalf);
  ASSERT_EQ(saved.error, "");
  const std::string z = dir_ + "/z";
  ASSERT_EQ(Train(MakeConfig(2, true, z), "", kHalf).error, "");
  // TP2 × DP2 + ZeRO-1's step-4 at one rank, at DP2 and at TP2, and one rank's and DP2 +
  // ZeRO-1's at TP2: the next steps' losses agree with the one-rank run's within 1e-5.
  ExpectRestLikeAlone(alone, MakeConfig(1, false, dir_ + "/r1"), tp + "/step-4");
  ExpectRestLikeAlone(alone, MakeConfig(2, false, dir_ + "/r2"), tp + "/step-4");
  ExpectRestLikeAlone(alone, MakeConfig(1, false, dir_ + "/r3", /*tp=*/2), tp + "/step-4");
  ExpectRestLikeAlone(alone, MakeConfig(1, false, dir_ + "/r4", /*tp=*/2), one + "/step-4");
  ExpectRestLikeAlone(alone, MakeConfig(1, false, dir_ + "/r5", /*tp=*/2), z + "/step-4");
  // Loaded at one rank, every tensor is bit for bit the boxes the TP ranks held in memory.
  const std::unique_ptr<OneRank> loaded = RestoredAtOneRank(tp + "/step-4");
  const model::Model& model = loaded->trainer->model();
  for (int tp_rank = 0; tp_rank < 2; ++tp_rank) {
    const model::ParameterTable share = model::ParameterTable::Build(model.config(), 2, tp_rank);
    for (const model::ParamSpec& s : share.specs()) {
      const float* whole = model.params().f32() + model.table().Find(s.name)->offset;
      const model::MatrixBox b = model::AsMatrix(s);
      for (int64_t i = 0; i < b.box_rows; ++i) {
        const float* row = whole + b.WholeIndex(i);
        const float* held = saved.rank_params[tp_rank].data() + s.offset + i * b.box_cols;
        ASSERT_EQ(std::vector<float>(row, row + b.box_cols),
                  std::vector<float>(held, held + b.box_cols))
            << s.name << " row " << b.row0 + i << " of TP rank " << tp_rank;
      }
    }
  }
}

TEST_F(CheckpointResumeTest, CorruptNewest_FallsBackToThePreviousOne) {
  const std::string ck = dir_ + "/ck";
  Config c = MakeConfig(2, true, ck);
  c.schedule.steps = 3 * kHalf;
  ASSERT_EQ(Train(c, "", 2 * kHalf).error, "");
  // Flip a byte inside rank 1's shard of step-8: rank 1 fails to load, both ranks fall back.
  const std::string shard = ck + "/step-8/" + checkpoint::ShardFileName(1);
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(shard) - 100));
    f.put('\x7f');
  }
  Config again = c;
  again.checkpoint.dir = dir_ + "/ck2";
  std::vector<std::unique_ptr<comm::Communicator>> group =
      comm::InProcessCommunicator::CreateGroup(2);
  std::vector<StatusOr<Trainer::Restored>> got(2, InternalError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto be = CreateRuntimeBackend(again.runtime);
      auto t = Trainer::Create(again, be->get(), group[r].get());
      got[r] = t.ok() ? (*t)->Restore(ck + "/step-8") : t.status();
    });
  }
  for (auto& th : threads) th.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(got[r].ok()) << got[r].status().ToString();
    EXPECT_EQ(got[r]->state.step, kHalf);
    EXPECT_EQ(got[r]->path, ck + "/step-4");
    EXPECT_NE(got[r]->fallback_reason.find("rank 1"), std::string::npos) << got[r]->fallback_reason;
    EXPECT_NE(got[r]->fallback_reason.find(checkpoint::ShardFileName(1)), std::string::npos);
  }
}

TEST_F(CheckpointResumeTest, CorruptStoreRecord_EndsTheRunWithDataLossNamingIt) {
  // Every record of store b damaged: the first step that draws from it meets one.
  dataloader::testing::WithRawDb(
      b_, [](rocksdb::DB* db, const std::vector<rocksdb::ColumnFamilyHandle*>& handles) {
        std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), handles[1]));
        std::vector<std::pair<std::string, std::string>> damaged;
        for (it->SeekToFirst(); it->Valid(); it->Next()) {
          std::string v = it->value().ToString();
          v[9] ^= 4;
          damaged.emplace_back(it->key().ToString(), v);
        }
        ASSERT_EQ(damaged.size(), 200u);
        for (const auto& [k, v] : damaged) {
          ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), handles[1], k, v).ok());
        }
      });
  // One rank (a group's other ranks are aborted by the worker: worker_e2e_jobs).
  const Run r = Train(MakeConfig(1, false, ""), "");
  EXPECT_NE(r.error.find("DATA_LOSS"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find(b_ + ": sequence "), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("checksum mismatch"), std::string::npos) << r.error;
}

TEST_F(CheckpointResumeTest, AnotherModelOrDataSeed_IsRefusedByName) {
  const std::string ck = dir_ + "/ck";
  ASSERT_EQ(Train(MakeConfig(1, false, ck), "", kHalf).error, "");
  Config wider = MakeConfig(1, false, "");
  wider.model.ffn_dim = 96;
  Run r = Train(wider, ck + "/step-4");
  EXPECT_NE(r.error.find("INVALID_ARGUMENT"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("ffn"), std::string::npos) << r.error;
  Config reseeded = MakeConfig(1, false, "");
  reseeded.data.seed = 9;
  r = Train(reseeded, ck + "/step-4");
  EXPECT_NE(r.error.find("data.seed"), std::string::npos) << r.error;
  r = Train(MakeConfig(1, false, ""), dir_ + "/nothing-here");
  EXPECT_NE(r.error.find("NOT_FOUND"), std::string::npos) << r.error;
}

}  // namespace
}  // namespace fullband::worker
