// TokenFile: a flat file of little-endian uint32 token ids, memory-mapped read-only, and the
// sequence sampler the single-process trainer reads it with.
//
// Sequence i is tokens [i·T, i·T + T + 1): inputs and targets of T positions, consecutive
// sequences sharing one token. Each epoch visits every sequence once in an order drawn from
// (seed, epoch); the position in that stream is the cursor, so (seed, cursor) names exactly
// the batches a run will read next.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace fullband::worker {

class TokenFile {
 public:
  // NOT_FOUND when the file cannot be opened; DATA_LOSS when its size is not a multiple of 4
  // or an id is >= vocab_size (naming the token's index); INVALID_ARGUMENT when it holds fewer
  // than seq_len + 1 tokens.
  static StatusOr<TokenFile> Open(const std::string& path, int64_t vocab_size, int64_t seq_len);

  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&&) = delete;
  TokenFile(const TokenFile&) = delete;
  ~TokenFile();

  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_sequences() const { return (num_tokens_ - 1) / seq_len_; }

  // Copies the B sequences at stream positions [cursor, cursor + B) of the seeded epoch order
  // into `out` (B, T + 1).
  void ReadBatch(uint64_t seed, int64_t cursor, int64_t batch, int32_t* out);

 private:
  TokenFile(std::string path, const uint32_t* data, size_t bytes, int64_t seq_len);
  // The sequence at position `pos` of epoch `epoch` (a seeded Fisher–Yates order, cached).
  int64_t SequenceAt(uint64_t seed, int64_t epoch, int64_t pos);

  std::string path_;
  const uint32_t* data_;
  size_t bytes_;
  int64_t num_tokens_;
  int64_t seq_len_;
  int64_t order_epoch_ = -1;
  uint64_t order_seed_ = 0;
  std::vector<int64_t> order_;
};

}  // namespace fullband::worker
