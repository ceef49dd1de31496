// The small configs that several tests share.
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

// The tiny model of the parallel and checkpoint tests: 2 layers of width 32, a vocabulary of 260
// (256 bytes, EOD 256; divisible by 4 ranks, should tensor parallelism want it), windows of 8
// with every second layer full.
inline ModelConfig TinyTestModel() {
  ModelConfig m;
  m.vocab_size = 260;
  m.eod_id = 256;
  m.d_model = 32;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.head_dim = 8;
  m.ffn_dim = 64;
  m.max_seq_len = 32;
  m.window = 8;
  m.full_attention_every = 2;
  return m;
}

}  // namespace fullband
