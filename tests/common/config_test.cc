// Config: YAML loading, defaults, validation errors that name the field and the value.
#include "common/config.h"

#include <gtest/gtest.h>

#include <functional>

namespace fullband {
namespace {

TEST(Config, EmptyYaml_GivesPaperDefaults) {
  StatusOr<Config> c = ParseConfig("", "empty.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const ModelConfig& m = c->model;
  EXPECT_EQ(m.vocab_size, 100352);
  EXPECT_EQ(m.d_model, 1536);
  EXPECT_EQ(m.n_layers, 24);
  EXPECT_EQ(m.n_heads, 16);
  EXPECT_EQ(m.n_kv_heads, 8);
  EXPECT_EQ(m.head_dim, 96);
  EXPECT_EQ(m.ffn_dim, 6656);
  EXPECT_EQ(m.window, 2048);
  EXPECT_EQ(m.eod_id, 100257);
  EXPECT_DOUBLE_EQ(m.z_loss, 1e-5);
  EXPECT_EQ(m.feedback_loss, FeedbackLoss::kMean);
  EXPECT_EQ(m.feedback_state, FeedbackState::kPostNorm);
  EXPECT_TRUE(m.pass1_input_norm);
}

TEST(Config, Fields_AreReadFromYaml) {
  StatusOr<Config> c = ParseConfig(R"(
model:
  vocab_size: 4096
  eod_id: 0
  d_model: 256
  n_layers: 4
  n_heads: 4
  n_kv_heads: 2
  head_dim: 64
  qk_norm: false
  feedback_loss: sum
  feedback_state: pre_norm
  jitter: 0.0
  z_loss: 0
)",
                                   "tiny.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model.vocab_size, 4096);
  EXPECT_EQ(c->model.n_kv_heads, 2);
  EXPECT_FALSE(c->model.qk_norm);
  EXPECT_EQ(c->model.feedback_loss, FeedbackLoss::kSum);
  EXPECT_EQ(c->model.feedback_state, FeedbackState::kPreNorm);
  EXPECT_EQ(c->model.jitter, 0.0);
}

TEST(Config, YamlRoundTrip_IsIdentity) {
  Config c;
  c.model.d_model = 320;
  c.model.rope_theta = 500000.25;
  c.model.feedback_loss = FeedbackLoss::kSum;
  c.model.prefix_mixin = false;
  StatusOr<Config> back = ParseConfig(ConfigToYaml(c), "dump");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, c);
}

struct BadCase {
  const char* yaml;
  const char* expected;  // substring of the error
};

class ConfigErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(ConfigErrors, BadInput_IsRejectedNamingFieldAndValue) {
  StatusOr<Config> c = ParseConfig(GetParam().yaml, "job.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find(GetParam().expected), std::string::npos)
      << c.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    All, ConfigErrors,
    ::testing::Values(
        BadCase{"model:\n  n_heads: 12\n  n_kv_heads: 5\n",
                "model.n_heads: 12 is not divisible by model.n_kv_heads = 5"},
        BadCase{"model:\n  head_dim: 95\n", "model.head_dim: 95 must be even"},
        BadCase{"model:\n  d_model: 0\n", "model.d_model: 0 must be positive"},
        BadCase{"model:\n  n_layers: -3\n", "model.n_layers: -3 must be positive"},
        BadCase{"model:\n  feedback_loss: median\n",
                "job.yaml:2: model.feedback_loss: expected one of mean, sum, got 'median'"},
        BadCase{"model:\n  feedback_state: middle\n", "expected one of post_norm, pre_norm"},
        BadCase{"model:\n  d_model: wide\n", "model.d_model: expected an integer, got 'wide'"},
        BadCase{"model:\n  d_model: 12.5\n", "expected an integer, got '12.5'"},
        BadCase{"model:\n  qk_norm: maybe\n", "model.qk_norm: expected true or false"},
        BadCase{"model:\n  rope_theta: [1, 2]\n",
                "model.rope_theta: expected a number, got a list"},
        BadCase{"model:\n  n_head: 16\n", "job.yaml:2: unknown field model.n_head"},
        BadCase{"optimizer:\n  lr: 1\n", "unknown section optimizer"},
        BadCase{"model: [1, 2]\n", "model: expected a mapping"},
        BadCase{"model:\n  d_model: [\n", "not valid YAML"},
        BadCase{"- 1\n- 2\n", "top level must be a mapping"},
        BadCase{"model:\n  eod_id: 200000\n", "model.eod_id: 200000 is outside the vocabulary"},
        BadCase{"model:\n  ignore_id: 5\n", "model.ignore_id: 5 is a token id"},
        BadCase{"model:\n  window: -1\n", "model.window: -1 must be >= 0"},
        BadCase{"model:\n  jitter: -0.5\n", "model.jitter"},
        BadCase{"model:\n  rope_theta: 0\n", "model.rope_theta"}));

TEST(Config, LoadConfigFile_MissingFileIsNotFound) {
  StatusOr<Config> c = LoadConfigFile("/nonexistent/fullband.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("/nonexistent/fullband.yaml"), std::string::npos);
}

TEST(Config, FullAttentionLayers_FollowEverySixth) {
  ModelConfig m;
  EXPECT_FALSE(m.IsFullAttentionLayer(0));
  EXPECT_TRUE(m.IsFullAttentionLayer(5));
  EXPECT_TRUE(m.IsFullAttentionLayer(11));
  EXPECT_FALSE(m.IsFullAttentionLayer(6));
  m.window = 0;
  EXPECT_TRUE(m.IsFullAttentionLayer(0));
}

}  // namespace
}  // namespace fullband

namespace fullband {
namespace {

TEST(Config, TrainingSections_AreReadAndRoundTrip) {
  StatusOr<Config> c = ParseConfig(R"(
data:
  path: /data/tokens.bin
  batch_size: 4
  seq_len: 128
optim:
  lr: 1.0e-3
  grad_clip: 0.5
  decay_embedding: true
schedule:
  steps: 500
  seed: 7
  phases:
    - {until: 0.75, mix: {1: 1.0}}
    - {until: 1.0, mix: {1: 0.75, 2: 0.22, 3: 0.03}}
runtime:
  recompute: full
  threads: 2
  save_to: out.safetensors
)",
                                   "train.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->data.path, "/data/tokens.bin");
  EXPECT_EQ(c->data.seq_len, 128);
  EXPECT_DOUBLE_EQ(c->optim.grad_clip, 0.5);
  EXPECT_TRUE(c->optim.decay_embedding);
  ASSERT_EQ(c->schedule.phases.size(), 2u);
  EXPECT_DOUBLE_EQ(c->schedule.phases[0].until, 0.75);
  EXPECT_EQ(c->schedule.phases[1].mix.size(), 3u);
  EXPECT_EQ(c->schedule.MaxPasses(), 3);
  EXPECT_EQ(c->runtime.recompute, Recompute::kFull);
  StatusOr<Config> back = ParseConfig(ConfigToYaml(*c), "dump");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, *c);
}

TEST(Config, DataSources_AreReadWithWeightsAndRoundTrip) {
  StatusOr<Config> c = ParseConfig(R"(
data:
  sources:
    - {store: /data/web, weight: 0.7}
    - {store: /data/code}
  prefetch: 8
)",
                                   "blend.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->data.sources.size(), 2u);
  EXPECT_EQ(c->data.sources[0].store, "/data/web");
  EXPECT_DOUBLE_EQ(c->data.sources[0].weight, 0.7);
  EXPECT_DOUBLE_EQ(c->data.sources[1].weight, 1.0);
  EXPECT_EQ(c->data.prefetch, 8);
  StatusOr<Config> back = ParseConfig(ConfigToYaml(*c), "dump");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, *c);
}

INSTANTIATE_TEST_SUITE_P(
    TrainingSections, ConfigErrors,
    ::testing::Values(
        BadCase{"schedule:\n  phases:\n    - {until: 1.0, mix: {1: 0.5, 2: 0.4}}\n",
                "schedule.phases[0].mix: probabilities sum to 0.9"},
        BadCase{"schedule:\n  phases:\n    - {until: 0.5, mix: {1: 1.0}}\n",
                "schedule.phases: the last phase must end at until: 1.0"},
        BadCase{"schedule:\n  phases:\n    - {until: 0.8, mix: {1: 1.0}}\n"
                "    - {until: 0.6, mix: {2: 1.0}}\n",
                "schedule.phases[1].until: 0.6"},
        BadCase{"schedule:\n  phases:\n    - {until: 1.0, mix: {0: 1.0}}\n",
                "pass count 0 outside [1, 64]"},
        BadCase{"schedule:\n  phases:\n    - {until: 1.0, mix: {1: 1.0}, extra: 3}\n",
                "unknown field schedule.phases[0].extra"},
        BadCase{"schedule:\n  phases: []\n", "schedule.phases: at least one phase is needed"},
        BadCase{"data:\n  seq_len: 0\n", "data.seq_len: 0 must be >= 1"},
        BadCase{"optim:\n  beta2: 1.5\n", "optim.beta2: 1.5"},
        BadCase{"optim:\n  cooldown_fraction: 2\n", "optim.cooldown_fraction"},
        BadCase{"runtime:\n  recompute: some\n",
                "runtime.recompute: expected one of none, selective, full"},
        BadCase{"runtime:\n  device: tpu\n", "runtime.device: expected cpu or cuda, got 'tpu'"},
        BadCase{"data:\n  batch_sise: 3\n", "unknown field data.batch_sise"},
        BadCase{"data:\n  path: a.bin\n  sources: [{store: s}]\n",
                "data.sources: give either data.path or data.sources"},
        BadCase{"data:\n  sources: [{store: s, weight: 0}]\n",
                "data.sources[0].weight: 0.000000 must be > 0"},
        BadCase{"data:\n  sources: [{store: s, wieght: 1}]\n",
                "unknown field data.sources[0].wieght"},
        BadCase{"data:\n  sources: [{weight: 1}]\n", "data.sources[0].store is required"}));

TEST(Config, CoordinatorSections_AreReadAndRoundTrip) {
  StatusOr<Config> c = ParseConfig(R"(
model:
  vocab_size: 4096
  eod_id: 0
  n_heads: 8
  n_kv_heads: 4
parallel:
  tp: 4
  dp: 2
  zero1: true
checkpoint:
  dir: /ckpt/run1
  every_steps: 200
  keep: 5
budget:
  kind: token_equivalents
  amount: 2.56e11
launcher:
  kind: slurm
  processes: 8
  command: [/opt/fullband/bin/fullband, train]
  extra_args: ["--log", "a b"]
  max_restarts: 7
  backoff_seconds: 1.5
  max_backoff_seconds: 30
)",
                                   "job.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->parallel.tp, 4);
  EXPECT_EQ(c->parallel.dp, 2);
  EXPECT_TRUE(c->parallel.zero1);
  EXPECT_EQ(c->checkpoint.dir, "/ckpt/run1");
  EXPECT_EQ(c->checkpoint.every_steps, 200);
  EXPECT_EQ(c->checkpoint.keep, 5);
  EXPECT_EQ(c->budget.kind, BudgetKind::kTokenEquivalents);
  EXPECT_DOUBLE_EQ(c->budget.amount, 2.56e11);
  EXPECT_EQ(c->launcher.kind, LauncherKind::kSlurm);
  EXPECT_EQ(c->launcher.processes, 8);
  EXPECT_EQ(c->launcher.command, (std::vector<std::string>{"/opt/fullband/bin/fullband", "train"}));
  EXPECT_EQ(c->launcher.extra_args, (std::vector<std::string>{"--log", "a b"}));
  EXPECT_EQ(c->launcher.max_restarts, 7);
  StatusOr<Config> back = ParseConfig(ConfigToYaml(*c), "dump");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, *c);
}

TEST(Config, CoordinatorSections_HaveDocumentedDefaults) {
  const Config c;
  EXPECT_EQ(c.parallel.tp, 1);
  EXPECT_EQ(c.parallel.dp, 1);
  EXPECT_FALSE(c.parallel.zero1);
  EXPECT_EQ(c.checkpoint.every_steps, 1000);
  EXPECT_EQ(c.budget.kind, BudgetKind::kTokens);
  EXPECT_EQ(c.budget.amount, 0);
  EXPECT_EQ(c.launcher.kind, LauncherKind::kLocal);
  EXPECT_EQ(c.launcher.max_restarts, 3);
  EXPECT_TRUE(c.Validate().ok());
}

INSTANTIATE_TEST_SUITE_P(
    CoordinatorSections, ConfigErrors,
    ::testing::Values(
        BadCase{"parallel:\n  tp: 3\n", "parallel.tp: 3 does not divide model.n_heads = 16"},
        BadCase{"model:\n  n_heads: 16\n  n_kv_heads: 2\nparallel:\n  tp: 4\n",
                "parallel.tp: 4 does not divide model.n_kv_heads = 2"},
        BadCase{"model:\n  vocab_size: 100353\nparallel:\n  tp: 2\n",
                "parallel.tp: 2 does not divide model.vocab_size = 100353"},
        BadCase{"parallel:\n  dp: 0\n", "parallel.dp: 0 must be >= 1"},
        BadCase{"parallel:\n  tq: 2\n", "job.yaml:2: unknown field parallel.tq"},
        BadCase{"checkpoint:\n  every_steps: -1\n", "checkpoint.every_steps: -1 must be >= 0"},
        BadCase{"checkpoint:\n  keep: many\n",
                "job.yaml:2: checkpoint.keep: expected an integer, got 'many'"},
        BadCase{"budget:\n  kind: dollars\n",
                "job.yaml:2: budget.kind: expected one of tokens, token_equivalents, flops"},
        BadCase{"budget:\n  amount: -5\n", "budget.amount: -5.000000 must be >= 0"},
        BadCase{"launcher:\n  kind: k8s\n", "launcher.kind: expected one of local, slurm"},
        BadCase{"launcher:\n  command: []\n", "launcher.command: must name the worker program"},
        BadCase{"launcher:\n  command: fullband\n", "launcher.command: expected a list of strings"},
        BadCase{"launcher:\n  extra_args: [[1]]\n",
                "launcher.extra_args[0]: expected a string, got a list"},
        BadCase{"launcher:\n  max_restarts: -1\n", "launcher.max_restarts: -1 must be >= 0"},
        BadCase{"launcher:\n  backoff_seconds: 10\n  max_backoff_seconds: 5\n",
                "launcher.max_backoff_seconds: 5.000000 must be >= launcher.backoff_seconds"},
        BadCase{"parallel:\n  tp: 2\n  dp: 2\nlauncher:\n  processes: 3\n",
                "launcher.processes: 3 is not parallel.tp × parallel.dp = 4"}));

TEST(Config, OversizeStrings_AreRefusedNamingTheFieldWithoutRepeatingThem) {
  const std::string big(5000, 'x');
  const auto error = [&](const std::function<void(Config&)>& edit) {
    Config c;
    edit(c);
    const Status s = c.Validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_LT(s.message().size(), 200u) << s.message().substr(0, 300);
    return s.message();
  };
  EXPECT_NE(error([&](Config& c) { c.data.path = big; }).find("data.path: 5000 bytes"),
            std::string::npos);
  EXPECT_NE(error([&](Config& c) {
              c.data.sources = {{"a", 1.0}, {big, 1.0}};
            }).find("data.sources[1].store"),
            std::string::npos);
  EXPECT_NE(
      error([&](Config& c) { c.launcher.command.push_back(big); }).find("launcher.command[2]"),
      std::string::npos);
  EXPECT_NE(error([&](Config& c) { c.runtime.device = big; }).find("runtime.device"),
            std::string::npos);
  // Short but wrong: the message quotes an excerpt of the value, never all of it.
  Config c;
  c.runtime.device = std::string(1000, 'g');
  EXPECT_LT(c.Validate().message().size(), 200u);
}

TEST(Status, Excerpt_CutsLongValuesAndSaysHowLong) {
  EXPECT_EQ(Excerpt("short"), "short");
  EXPECT_EQ(Excerpt(std::string(100, 'a'), 4), "aaaa… (100 bytes)");
}

}  // namespace
}  // namespace fullband
