// The Config <-> proto conversion: round trip, defaults for unset fields, validation.
#include "proto/config_convert.h"

#include <gtest/gtest.h>

namespace fullband {
namespace {

TEST(ConfigConvert, RoundTrip_PreservesEveryField) {
  Config c;
  c.model.vocab_size = 4096;
  c.model.eod_id = 3;
  c.model.d_model = 264;
  c.model.n_heads = 6;
  c.model.n_kv_heads = 3;
  c.model.rope_theta = 12345.5;
  c.model.qk_norm = false;
  c.model.window = 0;
  c.model.feedback_loss = FeedbackLoss::kSum;
  c.model.feedback_state = FeedbackState::kPreNorm;
  c.model.jitter = 0.0;
  c.model.pass1_input_norm = false;
  // Through the serialized bytes, as over the wire.
  proto::Config wire;
  ASSERT_TRUE(wire.ParseFromString(ToProto(c).SerializeAsString()));
  StatusOr<Config> back = FromProto(wire);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, c);
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
