// The model and its K-pass step, in process: recomputation modes agree bit for bit, the plain
// mask follows the spec (segment starts plain, p ~ U{1..len} by chi-square, no feedback
// across an EOD), bad inputs are refused, and activation memory scales as documented.
#include "model/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "checkpoint/safetensors.h"
#include "comm/in_process_communicator.h"
#include "ops/readout_loss.h"
#include "tests/common/temp_dir.h"

namespace fullband::model {
namespace {

ModelConfig SmallConfig() {
  ModelConfig m;
  m.vocab_size = 97;
  m.d_model = 24;
  m.n_layers = 3;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.head_dim = 6;
  m.ffn_dim = 40;
  m.max_seq_len = 64;
  m.window = 5;
  m.full_attention_every = 2;
  m.eod_id = 96;
  return m;
}

TEST(Model, TensorParallelShare_HoldsItsVocabularyRowsOnly) {
  // A rank of TP2 holds V/2 rows of the embedding and its readout's logits block is
  // (chunk, pitch of V/2): no rank ever holds (tokens × V) logits (docs/PARALLEL.md).
  auto backend = ops::CreateBackend({}).value();
  ModelConfig cfg = SmallConfig();
  cfg.vocab_size = 4096;
  cfg.eod_id = 4095;
  const ModelShape shape{4, 32, 2, Recompute::kNone};
  std::vector<std::unique_ptr<comm::Communicator>> tp2 =
      comm::InProcessCommunicator::CreateGroup(2);
  auto whole = Model::Create(cfg, shape, backend.get()).value();
  auto share = Model::Create(cfg, shape, backend.get(), tp2[1].get()).value();
  EXPECT_EQ(whole->readout_block().dims[1], ops::LogitsPitch(4096));
  EXPECT_EQ(share->readout_block().dims[1], ops::LogitsPitch(2048));
  EXPECT_LT(share->readout_block().dims[1], cfg.vocab_size);
  const ParamSpec& embed = *share->table().Find("embed.weight");
  EXPECT_EQ(embed.shape, (std::vector<int64_t>{2048, cfg.d_model}));
  EXPECT_EQ(embed.box_offset, (std::vector<int64_t>{2048, 0}));
  const ParamSpec& wo = *share->table().Find("layers.0.attn.wo.weight");
  EXPECT_EQ(wo.shape, (std::vector<int64_t>{cfg.d_model, 2 * cfg.head_dim}));
  EXPECT_EQ(wo.box_offset, (std::vector<int64_t>{0, 2 * cfg.head_dim}));
  cfg.ffn_dim = 41;  // two ranks cannot split it
  const Status s = Model::Create(cfg, shape, backend.get(), tp2[0].get()).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("does not divide model.ffn_dim = 41"), std::string::npos)
      << s.ToString();
}

std::vector<int32_t> RandomTokens(int64_t b, int64_t t, int64_t v, int64_t eod, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> tokens(b * (t + 1));
  for (auto& x : tokens) x = static_cast<int32_t>(rng.Below(v));
  for (int64_t i = 5; i < static_cast<int64_t>(tokens.size()); i += 7) tokens[i] = eod;
  return tokens;
}

std::vector<float> GradientsAfterStep(Recompute recompute, int passes,
                                      const ModelConfig& cfg = SmallConfig()) {
  auto backend = ops::CreateBackend({}).value();
  ModelShape shape{2, 16, passes, recompute};
  auto model = Model::Create(cfg, shape, backend.get()).value();
  model->InitParameters(11);
  const std::vector<int32_t> tokens = RandomTokens(2, 16, cfg.vocab_size, cfg.eod_id, 3);
  StepOptions o;
  o.passes = passes;
  o.jitter = 0.02;
  o.prefix_mixin = true;
  o.seed = 9;
  model->ZeroGradients();
  EXPECT_TRUE(model->Step(tokens.data(), 2, 16, o).ok());
  std::vector<float> g(model->grads().numel());
  backend->CopyToHost(g.data(), model->grads().data, g.size() * sizeof(float));
  return g;
}

// The default config, then every switch that changes which tensors the step keeps or reuses
// (feedback from x_L, no gate, no QK norm, plain pass-1 input, H·Dh wider than D, one layer).
std::vector<ModelConfig> RecomputeConfigs() {
  std::vector<ModelConfig> out{SmallConfig()};
  ModelConfig c = SmallConfig();
  c.feedback_state = FeedbackState::kPreNorm;
  c.attn_gate = false;
  c.qk_norm = false;
  c.pass1_input_norm = false;
  c.depth_scaling = false;
  c.feedback_loss = FeedbackLoss::kSum;
  out.push_back(c);
  c = SmallConfig();
  c.head_dim = 8;  // H·Dh = 32 > D = 24
  c.n_layers = 1;
  c.feedback_state = FeedbackState::kPreNorm;
  out.push_back(c);
  return out;
}

TEST(Model, Recompute_SelectiveAndFull_GiveBitwiseIdenticalGradients) {
  const std::vector<ModelConfig> configs = RecomputeConfigs();
  for (size_t i = 0; i < configs.size(); ++i) {
    for (int passes : {1, 2, 3}) {
      SCOPED_TRACE("config " + std::to_string(i) + ", passes " + std::to_string(passes));
      const std::vector<float> none = GradientsAfterStep(Recompute::kNone, passes, configs[i]);
      const std::vector<float> selective =
          GradientsAfterStep(Recompute::kSelective, passes, configs[i]);
      const std::vector<float> full = GradientsAfterStep(Recompute::kFull, passes, configs[i]);
      ASSERT_EQ(none.size(), full.size());
      EXPECT_EQ(std::memcmp(none.data(), selective.data(), none.size() * 4), 0);
      EXPECT_EQ(std::memcmp(none.data(), full.data(), none.size() * 4), 0);
      double norm = 0;
      for (float x : none) norm += static_cast<double>(x) * x;
      EXPECT_GT(norm, 0.0);  // the comparison above is not between two zero vectors
    }
  }
}

StepResult LossesWithJitter(double jitter, uint64_t seed) {
  auto backend = ops::CreateBackend({}).value();
  const ModelConfig cfg = SmallConfig();
  auto model = Model::Create(cfg, {2, 16, 3, Recompute::kNone}, backend.get()).value();
  model->InitParameters(11);
  const std::vector<int32_t> tokens = RandomTokens(2, 16, cfg.vocab_size, cfg.eod_id, 3);
  StepOptions o;
  o.passes = 3;
  o.jitter = jitter;
  o.seed = seed;
  o.backward = false;
  return model->Step(tokens.data(), 2, 16, o).value();
}

TEST(Model, Jitter_TouchesOnlyFeedbackPasses_AndIsSeeded) {
  const StepResult none = LossesWithJitter(0.0, 1);
  const StepResult a = LossesWithJitter(0.5, 1);
  const StepResult b = LossesWithJitter(0.5, 1);
  const StepResult c = LossesWithJitter(0.5, 2);
  EXPECT_EQ(a.pass_loss[0], none.pass_loss[0]);  // pass 1 never sees the feedback state
  EXPECT_NE(a.pass_loss[1], none.pass_loss[1]);  // passes >= 2 do, through ĥ + ξ
  EXPECT_NE(a.pass_loss[2], none.pass_loss[2]);
  EXPECT_EQ(a.pass_loss, b.pass_loss);                            // same seed, same draws
  EXPECT_NE(a.pass_loss[1], c.pass_loss[1]);                      // another seed, other draws
  EXPECT_EQ(LossesWithJitter(0.0, 9).pass_loss, none.pass_loss);  // no jitter: no randomness
}

TEST(Model, SameSeed_SameStep_IsReproducible) {
  EXPECT_EQ(GradientsAfterStep(Recompute::kNone, 2), GradientsAfterStep(Recompute::kNone, 2));
}

TEST(PlainMask, SegmentStartsArePlain_AndPlainIsAPrefixOfEachSegment) {
  const int64_t eod = 9, t = 40;
  Rng data(1);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> in(t);
    for (auto& x : in) x = data.Below(4) == 0 ? eod : static_cast<int32_t>(data.Below(9));
    std::vector<uint8_t> plain(t);
    Rng rng(trial);
    PlainMask(in.data(), t, eod, /*mixin=*/true, rng, plain.data());
    ASSERT_EQ(plain[0], 1);
    for (int64_t i = 1; i < t; ++i) {
      // The position after an EOD starts a segment: plain, so feedback never crosses an EOD.
      if (in[i - 1] == eod) {
        ASSERT_EQ(plain[i], 1) << "trial " << trial << " position " << i;
      } else if (plain[i]) {
        ASSERT_EQ(plain[i - 1], 1) << "plain positions must form a prefix, trial " << trial;
      }
    }
  }
}

TEST(PlainMask, MixinOff_OnlySegmentStartsArePlain) {
  const std::vector<int32_t> in = {1, 2, 9, 3, 9, 9, 4, 5};
  std::vector<uint8_t> plain(in.size());
  Rng rng(0);
  PlainMask(in.data(), in.size(), 9, /*mixin=*/false, rng, plain.data());
  EXPECT_EQ(plain, (std::vector<uint8_t>{1, 0, 0, 1, 0, 1, 1, 0}));
}

TEST(PlainMask, PrefixLength_IsUniformOverOneToSegmentLength) {
  // One segment of length 10: p ~ U{1..10}. Chi-square with 9 degrees of freedom over 20000
  // draws; the 0.999 quantile is 27.88, so a correct sampler fails this 1 time in 1000.
  const int64_t len = 10, draws = 20000;
  std::vector<int32_t> in(len, 1);
  std::vector<int64_t> counts(len + 1, 0);
  Rng rng(12345);
  std::vector<uint8_t> plain(len);
  for (int64_t i = 0; i < draws; ++i) {
    PlainMask(in.data(), len, 9, true, rng, plain.data());
    int64_t p = 0;
    while (p < len && plain[p]) ++p;
    ASSERT_GE(p, 1);
    ++counts[p];
  }
  const double expected = static_cast<double>(draws) / len;
  double chi2 = 0;
  for (int64_t p = 1; p <= len; ++p)
    chi2 += (counts[p] - expected) * (counts[p] - expected) / expected;
  EXPECT_LT(chi2, 27.88);
}

TEST(Model, Step_TokenOutsideVocabulary_IsInvalidArgumentNamingPosition) {
  auto backend = ops::CreateBackend({}).value();
  auto model =
      Model::Create(SmallConfig(), {1, 4, 1, Recompute::kNone}, backend.get()).value();
  std::vector<int32_t> tokens = {1, 2, 500, 3, 4};
  StatusOr<StepResult> r = model->Step(tokens.data(), 1, 4, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("token 500 at batch row 0, position 2"), std::string::npos)
      << r.status().message();
}

TEST(Model, Step_WrongShapeOrPasses_IsInvalidArgument) {
  auto backend = ops::CreateBackend({}).value();
  auto model =
      Model::Create(SmallConfig(), {1, 4, 2, Recompute::kNone}, backend.get()).value();
  std::vector<int32_t> tokens(10, 1);
  EXPECT_EQ(model->Step(tokens.data(), 2, 4, {}).status().code(), StatusCode::kInvalidArgument);
  StepOptions three;
  three.passes = 3;
  EXPECT_EQ(model->Step(tokens.data(), 1, 4, three).status().code(), StatusCode::kInvalidArgument);
}

TEST(Model, LoadParameters_ForeignOrMisshapedTensors_AreRefusedByName) {
  auto backend = ops::CreateBackend({}).value();
  ModelConfig cfg = SmallConfig();
  auto model = Model::Create(cfg, {1, 4, 1, Recompute::kNone}, backend.get()).value();
  model->InitParameters(1);
  const std::string path = fullband::testing::ProcessTempDir() + "/fullband_model_test.safetensors";
  ASSERT_TRUE(model->SaveParameters(path).ok());
  ASSERT_TRUE(model->LoadParameters(path).ok());
  cfg.ffn_dim = 48;  // same keys, other shapes
  auto other = Model::Create(cfg, {1, 4, 1, Recompute::kNone}, backend.get()).value();
  const Status s = other->LoadParameters(path);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ffn.w1.weight has shape [40, 24], expected [48, 24]"),
            std::string::npos)
      << s.message();
  cfg = SmallConfig();
  cfg.qk_norm = false;  // the file has q_norm/k_norm that this model does not
  auto no_qk = Model::Create(cfg, {1, 4, 1, Recompute::kNone}, backend.get()).value();
  EXPECT_NE(no_qk->LoadParameters(path).message().find("is not a parameter of this model"),
            std::string::npos);
}

TEST(Model, InitParameters_SameSeedSameWeights_OtherSeedOtherWeights) {
  auto backend = ops::CreateBackend({}).value();
  auto a = Model::Create(SmallConfig(), {1, 4, 1, Recompute::kNone}, backend.get()).value();
  auto b = Model::Create(SmallConfig(), {1, 4, 1, Recompute::kNone}, backend.get()).value();
  a->InitParameters(5);
  b->InitParameters(5);
  const size_t bytes = a->params().bytes();
  EXPECT_EQ(std::memcmp(a->params().data, b->params().data, bytes), 0);
  b->InitParameters(6);
  EXPECT_NE(std::memcmp(a->params().data, b->params().data, bytes), 0);
}

size_t ActivationBytes(int64_t layers, int passes, Recompute r) {
  auto backend = ops::CreateBackend({}).value();
  ModelConfig cfg = SmallConfig();
  cfg.n_layers = layers;
  return Model::Create(cfg, {2, 32, passes, r}, backend.get()).value()->activation_bytes();
}

TEST(Model, ActivationMemory_NoneGrowsLinearlyInPasses) {
  const double k1 = ActivationBytes(4, 1, Recompute::kNone);
  const double k2 = ActivationBytes(4, 2, Recompute::kNone);
  const double k3 = ActivationBytes(4, 3, Recompute::kNone);
  const double k4 = ActivationBytes(4, 4, Recompute::kNone);
  // Equal increments per feedback pass (pass 1 has no feedback input; step-wide scratch is
  // the constant term).
  EXPECT_NEAR(k4 - k3, k3 - k2, 64.0 * 64);
  EXPECT_GT(k3 - k2, 0.5 * k1);
}

TEST(Model, ActivationMemory_FullKeepsPerFeedbackPassOnlyLayerInputsAndFeedbackState) {
  const ModelConfig cfg = SmallConfig();
  const int64_t n = 2 * 32, d = cfg.d_model, layers = 4;
  const double k2 = ActivationBytes(layers, 2, Recompute::kFull);
  const double k3 = ActivationBytes(layers, 3, Recompute::kFull);
  // x[1..L-1], the readout gradient dh and shift(ĥ), (N, D) each; rstd_in and rstd_f, (N)
  // f32; the plain mask, (N) u8. Up to 64 bytes of alignment per tensor.
  const double per_pass = ((layers - 1) + 2) * n * d * 4.0 + 2 * n * 4.0 + n;
  EXPECT_NEAR(k3 - k2, per_pass, 64.0 * (layers + 4));
}

TEST(Model, ActivationMemory_FullGrowsWithLayersOnlyByTheSavedLayerInputs) {
  const int passes = 3;
  const int64_t layer_input_bytes = 2 * 32 * SmallConfig().d_model * sizeof(float);
  const double l4 = ActivationBytes(4, passes, Recompute::kFull);
  const double l8 = ActivationBytes(8, passes, Recompute::kFull);
  // Four more layers keep four more (N, D) inputs per pass, nothing else (64-byte alignment).
  EXPECT_NEAR(l8 - l4, 4.0 * passes * layer_input_bytes, 4.0 * passes * 64);
  EXPECT_LT(l8, 0.5 * ActivationBytes(8, passes, Recompute::kNone));
}

}  // namespace
}  // namespace fullband::model
