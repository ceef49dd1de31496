#include "proto/config_convert.h"

namespace fullband {
namespace {

// Copies every set field of the message onto `m`. The field list mirrors config.proto.
#define FB_FROM_PROTO(field) \
  if (p.has_##field()) m.field = p.field()

Status ModelFromProto(const proto::ModelConfig& p, ModelConfig& m) {
  FB_FROM_PROTO(vocab_size);
  FB_FROM_PROTO(d_model);
  FB_FROM_PROTO(n_layers);
  FB_FROM_PROTO(n_heads);
  FB_FROM_PROTO(n_kv_heads);
  FB_FROM_PROTO(head_dim);
  FB_FROM_PROTO(ffn_dim);
  FB_FROM_PROTO(max_seq_len);
  FB_FROM_PROTO(rope_theta);
  FB_FROM_PROTO(qk_norm);
  FB_FROM_PROTO(attn_gate);
  FB_FROM_PROTO(window);
  FB_FROM_PROTO(full_attention_every);
  FB_FROM_PROTO(depth_scaling);
  FB_FROM_PROTO(eod_id);
  FB_FROM_PROTO(ignore_id);
  FB_FROM_PROTO(z_loss);
  FB_FROM_PROTO(jitter);
  FB_FROM_PROTO(prefix_mixin);
  FB_FROM_PROTO(pass1_input_norm);
  switch (p.feedback_loss()) {
    case proto::FEEDBACK_LOSS_UNSPECIFIED:
      break;
    case proto::FEEDBACK_LOSS_MEAN:
      m.feedback_loss = FeedbackLoss::kMean;
      break;
    case proto::FEEDBACK_LOSS_SUM:
      m.feedback_loss = FeedbackLoss::kSum;
      break;
    default:
      return InvalidArgumentError("model.feedback_loss: unknown enum value " +
                                  std::to_string(p.feedback_loss()));
  }
  switch (p.feedback_state()) {
    case proto::FEEDBACK_STATE_UNSPECIFIED:
      break;
    case proto::FEEDBACK_STATE_POST_NORM:
      m.feedback_state = FeedbackState::kPostNorm;
      break;
    case proto::FEEDBACK_STATE_PRE_NORM:
      m.feedback_state = FeedbackState::kPreNorm;
      break;
    default:
      return InvalidArgumentError("model.feedback_state: unknown enum value " +
                                  std::to_string(p.feedback_state()));
  }
  return OkStatus();
}

#undef FB_FROM_PROTO

}  // namespace

proto::Config ToProto(const Config& config) {
  proto::Config out;
  const ModelConfig& m = config.model;
  proto::ModelConfig* p = out.mutable_model();
  p->set_vocab_size(m.vocab_size);
  p->set_d_model(m.d_model);
  p->set_n_layers(m.n_layers);
  p->set_n_heads(m.n_heads);
  p->set_n_kv_heads(m.n_kv_heads);
  p->set_head_dim(m.head_dim);
  p->set_ffn_dim(m.ffn_dim);
  p->set_max_seq_len(m.max_seq_len);
  p->set_rope_theta(m.rope_theta);
  p->set_qk_norm(m.qk_norm);
  p->set_attn_gate(m.attn_gate);
  p->set_window(m.window);
  p->set_full_attention_every(m.full_attention_every);
  p->set_depth_scaling(m.depth_scaling);
  p->set_eod_id(m.eod_id);
  p->set_ignore_id(m.ignore_id);
  p->set_z_loss(m.z_loss);
  p->set_feedback_loss(m.feedback_loss == FeedbackLoss::kMean ? proto::FEEDBACK_LOSS_MEAN
                                                              : proto::FEEDBACK_LOSS_SUM);
  p->set_feedback_state(m.feedback_state == FeedbackState::kPostNorm
                            ? proto::FEEDBACK_STATE_POST_NORM
                            : proto::FEEDBACK_STATE_PRE_NORM);
  p->set_jitter(m.jitter);
  p->set_prefix_mixin(m.prefix_mixin);
  p->set_pass1_input_norm(m.pass1_input_norm);
  return out;
}

StatusOr<Config> FromProto(const proto::Config& message) {
  Config config;
  FB_RETURN_IF_ERROR(ModelFromProto(message.model(), config.model));
  FB_RETURN_IF_ERROR(config.Validate());
  return config;
}

}  // namespace fullband
