// The Config <-> proto conversion: round trip, defaults for unset fields, validation.
#include "proto/config_convert.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/proto/fill_every_field.h"

namespace fullband {
namespace {

TEST(ConfigConvert, RoundTrip_PreservesEveryField) {
  testing::ExpectEveryFieldRoundTrips<proto::Config>([](const proto::Config& every) {
    Config config;
    EXPECT_TRUE(CopyFromProto(every, config).ok());
    return ToProto(config);
  });
}

TEST(ConfigConvert, RoundTrip_PreservesEverySection) {
  Config c;
  c.model.n_heads = 8;
  c.model.n_kv_heads = 4;
  c.parallel.tp = 2;
  c.parallel.dp = 3;
  c.parallel.zero1 = true;
  c.data.sources = {{"/data/web", 0.7}, {"/data/code", 0.3}};
  c.data.prefetch = 9;
  c.data.batch_size = 18;
  c.data.seq_len = 512;
  c.data.seed = 11;
  c.optim.lr = 1.5e-3;
  c.optim.beta1 = 0.8;
  c.optim.decay_norms = true;
  c.optim.warmup_steps = 7;
  c.optim.cooldown_fraction = 0.5;
  c.schedule.steps = 1234;
  c.schedule.seed = 99;
  c.schedule.phases = {{0.75, {{1, 1.0}}}, {1.0, {{1, 0.75}, {2, 0.22}, {3, 0.03}}}};
  c.checkpoint.dir = "/ckpt";
  c.checkpoint.every_steps = 50;
  c.checkpoint.keep = 0;
  c.budget.kind = BudgetKind::kFlops;
  c.budget.amount = 3.5e18;
  c.launcher.kind = LauncherKind::kSlurm;
  c.launcher.processes = 6;
  c.launcher.command = {"/opt/fullband", "train"};
  c.launcher.extra_args = {"--verbose", "x y"};
  c.launcher.max_restarts = 5;
  c.launcher.backoff_seconds = 2.5;
  c.launcher.max_backoff_seconds = 60;
  c.runtime.device = "cuda";
  c.runtime.threads = 3;
  c.runtime.recompute = Recompute::kSelective;
  c.runtime.log_every = 2;
  c.runtime.init_seed = 4;
  c.runtime.init_from = "w.safetensors";
  c.runtime.save_to = "out.safetensors";
  c.runtime.peak_gflops = 123.5;
  ASSERT_TRUE(c.Validate().ok()) << c.Validate().ToString();
  proto::Config wire;
  ASSERT_TRUE(wire.ParseFromString(ToProto(c).SerializeAsString()));
  StatusOr<Config> back = FromProto(wire);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, c);
}

TEST(ConfigConvert, EmptyMessage_GivesDefaultConfig) {
  StatusOr<Config> c = FromProto(proto::Config());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(*c, Config());
}

TEST(ConfigConvert, BadParallelLayout_IsRejectedNamingTheField) {
  proto::Config wire;
  wire.mutable_parallel()->set_tp(3);
  StatusOr<Config> c = FromProto(wire);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("parallel.tp: 3 does not divide model.n_heads = 16"),
            std::string::npos)
      << c.status().message();
}

TEST(ConfigConvert, UnknownBudgetKind_IsRejected) {
  proto::Config wire;
  wire.mutable_budget()->set_kind(static_cast<proto::BudgetKind>(9));
  StatusOr<Config> c = FromProto(wire);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("budget.kind: unknown enum value 9"), std::string::npos);
}

TEST(ConfigConvert, UnsetFields_KeepDefaults) {
  proto::Config wire;
  wire.mutable_model()->set_n_layers(2);
  StatusOr<Config> c = FromProto(wire);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Config expected;
  expected.model.n_layers = 2;
  EXPECT_EQ(*c, expected);
}

TEST(ConfigConvert, InvalidValues_AreRejectedNamingTheField) {
  proto::Config wire;
  wire.mutable_model()->set_n_kv_heads(5);
  StatusOr<Config> c = FromProto(wire);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("model.n_heads: 16 is not divisible"), std::string::npos);
}

TEST(ConfigConvert, UnknownEnumValue_IsRejected) {
  proto::Config wire;
  wire.mutable_model()->set_feedback_loss(static_cast<proto::FeedbackLoss>(7));
  StatusOr<Config> c = FromProto(wire);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("model.feedback_loss: unknown enum value 7"),
            std::string::npos);
}

}  // namespace
}  // namespace fullband
