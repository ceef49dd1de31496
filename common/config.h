// Config: the one configuration aggregate of fullband, loaded from YAML and validated.
//
// Every field has a comment and its default (DESIGN Appendix A); the YAML keys are the field
// names. Loading rejects unknown keys, wrong types and out-of-range values with an
// INVALID_ARGUMENT naming the field path and the value ("model.n_heads: 12 is not divisible
// by model.n_kv_heads = 5"). A Config is passed by const&, never global.
// Sections that later components own (parallel, data, optim, schedule, checkpoint, runtime)
// join this aggregate with those components.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace fullband {

enum class FeedbackLoss { kMean, kSum };        // total = ℓ1 + mean(ℓ2..K) | ℓ1 + ... + ℓK
enum class FeedbackState { kPostNorm, kPreNorm };  // h[k] after the final norm | before it

std::string_view FeedbackLossName(FeedbackLoss v);
std::string_view FeedbackStateName(FeedbackState v);

// The latent-feedback transformer (DESIGN Appendix A); defaults are the paper's 1B model.
struct ModelConfig {
  int64_t vocab_size = 100352;  // V, padded Phi-4 vocabulary
  int64_t d_model = 1536;       // D
  int64_t n_layers = 24;        // L
  int64_t n_heads = 16;         // H, query heads
  int64_t n_kv_heads = 8;       // Hkv, key/value heads (GQA); divides H
  int64_t head_dim = 96;        // Dh, even (RoPE pairs (i, i + Dh/2))
  int64_t ffn_dim = 6656;       // F, SwiGLU hidden size
  int64_t max_seq_len = 8192;   // longest sequence the model is trained or run on
  double rope_theta = 10000;    // RoPE base
  bool qk_norm = true;          // per-head RMSNorm of q and k
  bool attn_gate = true;        // headwise sigmoid output gate
  int64_t window = 2048;        // W, sliding window of windowed layers; 0 = no window
  int64_t full_attention_every = 6;  // layer l is full when (l + 1) % this == 0; 0 = never
  bool depth_scaling = true;    // residual branches scaled by 1/sqrt(L)
  int64_t eod_id = 100257;      // <|endoftext|>: a segment starts after it
  int64_t ignore_id = -1;       // targets equal to this are not counted
  double z_loss = 1.0e-5;       // weight of mean(logsumexp²); 0 disables
  FeedbackLoss feedback_loss = FeedbackLoss::kMean;
  FeedbackState feedback_state = FeedbackState::kPostNorm;
  double jitter = 0.02;         // ξ ~ U(-jitter, jitter) added to h during training
  bool prefix_mixin = true;     // per segment and pass, a random plain prefix
  bool pass1_input_norm = true; // pass 1 input is RMSNorm(e; norm_in) (false: e itself)

  // OK, or INVALID_ARGUMENT naming the first bad field as "model.<field>".
  Status Validate() const;
  // True when layer l (0-based) uses full attention rather than the window.
  bool IsFullAttentionLayer(int64_t layer) const;

  bool operator==(const ModelConfig&) const = default;
};

struct Config {
  ModelConfig model;

  Status Validate() const;
  bool operator==(const Config&) const = default;
};

// Parses YAML text. `source` names the text in errors ("job.yaml"). The result is validated.
StatusOr<Config> ParseConfig(std::string_view yaml_text, std::string_view source);
// Reads and parses a YAML file (NOT_FOUND if it cannot be read).
StatusOr<Config> LoadConfigFile(const std::string& path);
// The YAML form of a config; ParseConfig(ConfigToYaml(c)) == c.
std::string ConfigToYaml(const Config& config);

}  // namespace fullband
