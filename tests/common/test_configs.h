// The small job config that the step-plan and coordinator tests share.
#pragma once

#include "common/config.h"

namespace fullband {

// A tiny model, 128 tokens per step (B = 4, T = 32), a token budget of 20 steps.
inline Config SmallTestConfig() {
  Config c;
  c.model.vocab_size = 512;
  c.model.eod_id = 0;
  c.model.d_model = 64;
  c.model.n_layers = 2;
  c.model.n_heads = 4;
  c.model.n_kv_heads = 2;
  c.model.head_dim = 16;
  c.model.ffn_dim = 128;
  c.data.batch_size = 4;
  c.data.seq_len = 32;
  c.budget.amount = 128 * 20;
  return c;
}

}  // namespace fullband
