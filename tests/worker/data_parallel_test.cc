// Data parallelism against one rank (docs/PARALLEL.md): DP2 and DP4, ranks played by threads
// over InProcessCommunicator, train the same global batches as one rank — K = 1, 2, 3 with
// jitter and prefix mixin on, ZeRO-1 on and off, every recompute mode — and must agree on
// every pass's loss and every parameter after 5 steps; a layout run twice is bitwise identical; the
// bytes each rank hands to collectives per step are the analytic count; and the gradient buckets
// tile the arena in backward order.
#include "worker/data_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <thread>

#include "comm/in_process_communicator.h"
#include "common/random.h"
#include "common/step_plan.h"
#include "tests/common/temp_dir.h"
#include "tests/common/test_configs.h"
#include "worker/trainer.h"

namespace fullband::worker {
namespace {

// Random token ids with an EOD about every 40 tokens, as a token file.
std::string TokenFile() {
  static const std::string path = [] {
    const std::string p = fullband::testing::ProcessTempDir() + "/dp_tokens.bin";
    Rng rng(7);
    std::vector<uint32_t> ids(1 << 16);
    for (uint32_t& id : ids) id = rng.Below(40) == 0 ? 256 : static_cast<uint32_t>(rng.Below(256));
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(ids.data()), ids.size() * 4);
    return p;
  }();
  return path;
}

Config TinyConfig(int64_t passes, Recompute recompute, bool zero1 = false) {
  Config c;
  c.parallel.zero1 = zero1;
  c.model = TinyTestModel();
  ModelConfig& m = c.model;
  m.jitter = 0.02;
  m.prefix_mixin = true;
  c.data.path = TokenFile();
  c.data.batch_size = 8;
  c.data.seq_len = 24;
  c.optim.lr = 1e-3;
  c.optim.warmup_steps = 2;
  c.schedule.steps = 5;
  c.schedule.phases = {{1.0, {{passes, 1.0}}}};
  c.runtime.recompute = recompute;
  c.runtime.threads = 1;
  c.runtime.peak_gflops = 1;  // MFU is not under test
  return c;
}

struct RankRun {
  std::string error;
  std::vector<std::vector<double>> losses;  // per step, per pass
  std::vector<float> params;
  std::vector<int64_t> all_reduce_bytes, reduce_scatter_bytes, all_gather_bytes;  // per step
};

// Trains `config` laid out as TP `tp` × DP `dp`, one thread per rank.
std::vector<RankRun> TrainLayout(Config config, int dp, int tp = 1) {
  config.parallel.dp = dp;
  config.parallel.tp = tp;
  std::vector<std::unique_ptr<comm::Communicator>> group =
      comm::InProcessCommunicator::CreateGroup(tp * dp);
  std::vector<RankRun> out(tp * dp);
  const auto rank_main = [&](int rank) {
    RankRun& o = out[rank];
    comm::Communicator* comm = group[rank].get();
    const auto fail = [&](const Status& s) { o.error = s.ToString(); };
    ops::BackendOptions bo;
    bo.num_threads = 1;
    StatusOr<std::unique_ptr<ops::Backend>> be = ops::CreateBackend(bo);
    if (!be.ok()) return fail(be.status());
    StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(config, be->get(), comm);
    if (!t.ok()) return fail(t.status());
    StatusOr<std::unique_ptr<BatchSource>> data =
        BatchSource::Open(config, (*t)->layout().dp_rank, dp, 0);
    if (!data.ok()) return fail(data.status());
    LocalStepSource steps(*StepPlan::Create(config), 0);
    comm::Communicator::Traffic before = (*t)->traffic();
    StatusOr<TrainSummary> s = (*t)->Run(steps, **data, [&](const StepRecord& r) {
      const comm::Communicator::Traffic now = (*t)->traffic();
      o.losses.push_back(r.pass_loss);
      o.all_reduce_bytes.push_back(now.all_reduce - before.all_reduce);
      o.reduce_scatter_bytes.push_back(now.reduce_scatter - before.reduce_scatter);
      o.all_gather_bytes.push_back(now.all_gather - before.all_gather);
      before = now;
    });
    if (!s.ok()) return fail(s.status());
    const ops::Tensor p = (*t)->model().params();
    o.params.assign(p.f32(), p.f32() + p.numel());
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < tp * dp; ++r) threads.emplace_back(rank_main, r);
  for (auto& th : threads) th.join();
  return out;
}

// ‖a − b‖ / ‖b‖ over each parameter tensor: the worst.
double WorstRelativeDiff(const model::ParameterTable& table, const std::vector<float>& a,
                         const std::vector<float>& b) {
  double worst = 0;
  for (const model::ParamSpec& s : table.specs()) {
    double diff = 0, norm = 0;
    for (int64_t i = s.offset; i < s.offset + s.numel; ++i) {
      diff += (a[i] - b[i]) * static_cast<double>(a[i] - b[i]);
      norm += b[i] * static_cast<double>(b[i]);
    }
    worst = std::max(worst, std::sqrt(diff / std::max(norm, 1e-30)));
  }
  return worst;
}

// The whole model's parameter arena (one rank's table) from the shares of the TP ranks
// [first, first + tp) of a layout: each rank's box of every tensor put in its place.
std::vector<float> Assemble(const ModelConfig& m, const std::vector<RankRun>& runs, int first,
                            int tp) {
  const model::ParameterTable whole = model::ParameterTable::Build(m);
  std::vector<float> out(whole.total_numel(), 0.0f);
  for (int r = 0; r < tp; ++r) {
    const model::ParameterTable share = model::ParameterTable::Build(m, tp, r);
    for (const model::ParamSpec& s : share.specs()) {
      const model::ParamSpec& g = *whole.Find(s.name);
      if (s.split == TpSplit::kReplicated && r > 0) {  // the same on every rank of the group
        EXPECT_TRUE(std::equal(out.begin() + g.offset, out.begin() + g.offset + g.numel,
                               runs[first + r].params.begin() + s.offset))
            << s.name << " differs between TP ranks " << first << " and " << first + r;
        continue;
      }
      const model::MatrixBox b = model::AsMatrix(s);
      for (int64_t i = 0; i < b.box_rows; ++i) {
        std::copy_n(runs[first + r].params.begin() + s.offset + i * b.box_cols, b.box_cols,
                    out.begin() + g.offset + b.WholeIndex(i));
      }
    }
  }
  return out;
}

// `c` laid out as TP `tp` × DP `dp` against one rank without ZeRO-1.
void ExpectSameTraining(const Config& c, int dp, int tp = 1) {
  Config alone = c;
  alone.parallel.zero1 = false;
  const std::vector<RankRun> one = TrainLayout(alone, 1), many = TrainLayout(c, dp, tp);
  ASSERT_EQ(one[0].error, "");
  for (const RankRun& r : many) ASSERT_EQ(r.error, "");
  ASSERT_EQ(one[0].losses.size(), 5u);
  const model::ParameterTable table = model::ParameterTable::Build(c.model);
  for (int rank = 0; rank < tp * dp; ++rank) {
    const RankRun& r = many[rank];
    ASSERT_EQ(r.losses.size(), one[0].losses.size());
    for (size_t s = 0; s < r.losses.size(); ++s) {
      ASSERT_EQ(r.losses[s].size(), one[0].losses[s].size());
      for (size_t k = 0; k < r.losses[s].size(); ++k) {
        EXPECT_NEAR(r.losses[s][k], one[0].losses[s][k], 1e-5 * std::abs(one[0].losses[s][k]))
            << "rank " << rank << " step " << s << " pass " << k + 1;
      }
    }
    // The ranks of a DP group hold the same share as DP rank 0 of their TP rank.
    EXPECT_EQ(r.params, many[rank % tp].params) << "rank " << rank << " drifted";
  }
  for (int first = 0; first < tp * dp; first += tp) {
    EXPECT_LE(WorstRelativeDiff(table, Assemble(c.model, many, first, tp), one[0].params), 1e-5)
        << "TP group of rank " << first;
  }
}

TEST(DataParallel, DP2AndDP4_TrainLikeOneRank_ForEveryPassCount_WithAndWithoutZero1) {
  for (bool zero1 : {false, true}) {
    for (int64_t k : {1, 2, 3}) {
      for (int dp : {2, 4}) {
        SCOPED_TRACE("K = " + std::to_string(k) + ", DP" + std::to_string(dp) +
                     (zero1 ? ", ZeRO-1" : ""));
        ExpectSameTraining(TinyConfig(k, Recompute::kNone, zero1), dp);
      }
    }
  }
}

TEST(TensorParallel, TP2AndTP2xDP2_TrainLikeOneRank_ForEveryPassCount_WithAndWithoutZero1) {
  for (bool zero1 : {false, true}) {
    for (int64_t k : {1, 2, 3}) {
      for (int dp : {1, 2}) {
        SCOPED_TRACE("K = " + std::to_string(k) + ", TP2 × DP" + std::to_string(dp) +
                     (zero1 ? ", ZeRO-1" : ""));
        ExpectSameTraining(TinyConfig(k, Recompute::kNone, zero1), dp, /*tp=*/2);
      }
    }
  }
}

TEST(TensorParallel, TP2AndTP2xDP2_TrainLikeOneRank_InEveryRecomputeMode) {
  for (Recompute mode : {Recompute::kSelective, Recompute::kFull}) {
    for (int dp : {1, 2}) {
      SCOPED_TRACE(std::string(RecomputeName(mode)) + ", TP2 × DP" + std::to_string(dp));
      ExpectSameTraining(TinyConfig(3, mode, /*zero1=*/dp == 2), dp, /*tp=*/2);
    }
  }
}

TEST(TensorParallel, TP4_TrainsLikeOneRank) {
  Config c = TinyConfig(2, Recompute::kNone);
  c.model.n_kv_heads = 4;  // tp must divide it
  ExpectSameTraining(c, 1, /*tp=*/4);
}

TEST(TensorParallel, SameLayoutTwice_IsBitwiseIdentical) {
  const Config c = TinyConfig(3, Recompute::kNone, /*zero1=*/true);
  const std::vector<RankRun> a = TrainLayout(c, 2, 2), b = TrainLayout(c, 2, 2);
  for (size_t r = 0; r < a.size(); ++r) {
    ASSERT_EQ(a[r].error, "");
    ASSERT_EQ(b[r].error, "");
    EXPECT_EQ(a[r].params, b[r].params) << "rank " << r;
    EXPECT_EQ(a[r].losses, b[r].losses) << "rank " << r;
  }
}

TEST(DataParallel, DP2_TrainsLikeOneRank_InEveryRecomputeMode) {
  for (Recompute mode : {Recompute::kSelective, Recompute::kFull}) {
    for (bool zero1 : {false, true}) {
      SCOPED_TRACE(std::string(RecomputeName(mode)) + (zero1 ? ", ZeRO-1" : ""));
      ExpectSameTraining(TinyConfig(3, mode, zero1), 2);
    }
  }
}

TEST(DataParallel, SameLayoutTwice_IsBitwiseIdentical) {
  const Config c = TinyConfig(2, Recompute::kNone);
  const std::vector<RankRun> a = TrainLayout(c, 2), b = TrainLayout(c, 2);
  ASSERT_EQ(a[0].error, "");
  ASSERT_EQ(b[0].error, "");
  EXPECT_EQ(a[0].params, b[0].params);
  EXPECT_EQ(a[0].losses, b[0].losses);
}

TEST(DataParallel, BytesPerStep_AreTheAnalyticCount) {
  // docs/PARALLEL.md: per step, each DP rank all-reduces 4 · total_numel bytes of gradients,
  // 8 of the target count and 8 · (K + 1) of losses.
  for (int64_t k : {1, 3}) {
    const Config c = TinyConfig(k, Recompute::kNone);
    const int64_t numel = model::ParameterTable::Build(c.model).total_numel();
    for (const RankRun& r : TrainLayout(c, 2)) {
      ASSERT_EQ(r.error, "");
      for (int64_t bytes : r.all_reduce_bytes) EXPECT_EQ(bytes, 4 * numel + 8 + 8 * (k + 1));
    }
    // One rank alone reduces no gradients.
    const std::vector<RankRun> one = TrainLayout(c, 1);
    for (int64_t bytes : one[0].all_reduce_bytes) EXPECT_EQ(bytes, 8 + 8 * (k + 1));
  }
}

TEST(TensorParallel, BytesPerStep_AreTheAnalyticCount) {
  // docs/PARALLEL.md, "Bytes per step": with N tokens, width D and L layers, each TP rank
  // all-reduces N·D floats for the embedding, then per pass 4L for the layers (two halves, each
  // way) and one for the readout's dh; per pass the CE sum (8 bytes) and an all-gather of the
  // N per-row log-sum-exps of every rank; once per step the q/k norm gains' gradients (2L·dh
  // floats) and the squared gradient norm. The DP group (here of one rank) carries the target
  // count and the losses.
  const int tp = 2;
  for (int64_t k : {1, 3}) {
    const Config c = TinyConfig(k, Recompute::kNone);
    const ModelConfig& m = c.model;
    const int64_t n = c.data.batch_size * c.data.seq_len, d = m.d_model, l = m.n_layers;
    const int64_t tp_bytes = 4 * n * d * (1 + k * (4 * l + 1)) + 8 * k + 4 * 2 * l * m.head_dim + 8;
    for (const RankRun& r : TrainLayout(c, 1, tp)) {
      ASSERT_EQ(r.error, "");
      for (size_t s = 0; s < r.all_reduce_bytes.size(); ++s) {
        EXPECT_EQ(r.all_reduce_bytes[s], tp_bytes + 8 + 8 * (k + 1)) << "K = " << k;
        EXPECT_EQ(r.all_gather_bytes[s], k * 4 * n * tp) << "K = " << k;
        EXPECT_EQ(r.reduce_scatter_bytes[s], 0);
      }
    }
  }
}

TEST(DataParallel, BytesPerStepUnderZero1_AreTheAnalyticCount) {
  // docs/PARALLEL.md: the gradients are reduce-scattered and the parameters all-gathered, each
  // 4 · P bytes of the arena padded to P, a multiple of 16 · dp floats; the all-reduces carry
  // the target count, the squared norm and the losses.
  const int64_t k = 2;
  const Config c = TinyConfig(k, Recompute::kNone, /*zero1=*/true);
  const int64_t numel = model::ParameterTable::Build(c.model).total_numel();
  const int64_t padded = (numel + 63) / 64 * 64;  // 16 · 4 ranks
  for (const RankRun& r : TrainLayout(c, 4)) {
    ASSERT_EQ(r.error, "");
    for (size_t s = 0; s < r.all_reduce_bytes.size(); ++s) {
      EXPECT_EQ(r.all_reduce_bytes[s], 8 + 8 + 8 * (k + 1));
      EXPECT_EQ(r.reduce_scatter_bytes[s], 4 * padded);
      EXPECT_EQ(r.all_gather_bytes[s], 4 * padded);
    }
  }
}

TEST(GradientReducer, Buckets_TileTheArenaAndStartAsLayersFinish) {
  const Config c = TinyConfig(1, Recompute::kNone);
  const model::ParameterTable table = model::ParameterTable::Build(c.model);
  std::vector<std::unique_ptr<comm::Communicator>> one =
      comm::InProcessCommunicator::CreateGroup(1);
  std::vector<float> grads(table.total_numel(), 1.0f);
  // Buckets of one layer's size: the two layers and the final norm start before Finish.
  const model::ParamSpec* w2 = table.Find("layers.0.ffn.w2.weight");
  const int64_t layer_floats =
      w2->offset + w2->numel - table.Find("layers.0.attn_norm.weight")->offset;
  GradientReducer reducer(table, grads.data(), one[0].get(), 4 * layer_floats);
  EXPECT_GE(reducer.num_buckets(), 3);
  const int64_t before = one[0]->traffic().all_reduce;
  reducer.BeginStep();
  for (int l : {1, 0}) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const model::ParamSpec* a = table.Find(p + "attn_norm.weight");
    const model::ParamSpec* b = table.Find(p + "ffn.w2.weight");
    reducer.MarkFinal(a->offset, b->offset + b->numel);
  }
  EXPECT_GE(reducer.started_early(), 1);
  ASSERT_TRUE(reducer.Finish(std::chrono::seconds(5)).ok());
  EXPECT_EQ(one[0]->traffic().all_reduce - before, 4 * table.total_numel());
  // One rank alone completes each reduction as it starts: the layers' buckets were hidden,
  // the embedding's (started by Finish) was not.
  EXPECT_GT(reducer.hidden_fraction(), 0.0);
  EXPECT_LT(reducer.hidden_fraction(), 1.0);
  reducer.BeginStep();
  ASSERT_TRUE(reducer.Finish(std::chrono::seconds(5)).ok());
  EXPECT_EQ(reducer.hidden_fraction(), 0.0);  // nothing was final before Finish
}

TEST(Layout, WorldThatIsNotTpTimesDp_IsRefusedByName) {
  ParallelConfig p;
  p.dp = 2;
  const Status s = comm::MakeLayout(p, 3, 0).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tp × dp"), std::string::npos) << s.ToString();
  Config c = TinyConfig(1, Recompute::kNone);
  c.parallel.dp = 3;
  const Status v = c.Validate();
  EXPECT_NE(v.message().find("data.batch_size"), std::string::npos) << v.ToString();
}

}  // namespace
}  // namespace fullband::worker
