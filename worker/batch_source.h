// BatchSource: the rows of each step's global batch that one data-parallel rank trains on,
// from the flat token file (data.path) or the blended token stores (data.sources).
//
// Step s's global batch is sequences [s·B, (s + 1)·B) of the sampler's order (B =
// data.batch_size, common/step_plan.h); DP rank r of dp reads the contiguous slice
// [r·B/dp, (r + 1)·B/dp) of it. Steps are read in order, starting at the step the source was
// opened at; a step out of that order is FAILED_PRECONDITION (the stores' reader streams).
// Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status.h"
#include "common/step_plan.h"
#include "dataloader/reader.h"
#include "dataloader/token_store.h"
#include "worker/token_file.h"

namespace fullband::worker {

class BatchSource {
 public:
  // Opens the stream at `first_step`; `start` (optional) is the sampler cursor a checkpoint
  // saved there, which spares rebuilding it (O(draws) with several stores) and is checked.
  // Errors: INVALID_ARGUMENT when the config names no data, dp does not divide the batch, or
  // `start` is not a cursor of these stores at that step; those of opening the token file or
  // stores (NOT_FOUND, DATA_LOSS, ...).
  static StatusOr<std::unique_ptr<BatchSource>> Open(
      const Config& config, int dp_rank, int dp_size, int64_t first_step,
      const dataloader::SamplerCursor* start = nullptr);

  int64_t rows() const { return rows_; }  // B / dp
  // This rank's rows of `step` into tokens (rows(), T + 1). DATA_LOSS names a corrupt record.
  Status Read(const StepAssignment& step, int32_t* tokens);
  const std::string& description() const { return description_; }
  // The sampler cursor after the last step read (before the first: the start): `draws` global
  // sequences, and per store how many it gave (none for a token file).
  const dataloader::SamplerCursor& cursor() const { return cursor_; }
  // The tokenizer hash of the stores ("" for a token file).
  const std::string& tokenizer_hash() const { return tokenizer_hash_; }

 private:
  BatchSource() = default;
  Status OpenStores(const Config& config, int64_t first_step,
                    const dataloader::SamplerCursor* start);

  int64_t rows_ = 0, global_batch_ = 0;
  int dp_rank_ = 0, dp_size_ = 1;
  int64_t next_step_ = 0;
  uint64_t seed_ = 0;
  std::unique_ptr<TokenFile> file_;
  std::vector<std::unique_ptr<dataloader::RocksDbTokenStore>> stores_;
  std::unique_ptr<dataloader::BatchReader> reader_;  // reads stores_: declared after them
  std::string description_;
  dataloader::SamplerCursor cursor_;
  std::string tokenizer_hash_;
};

}  // namespace fullband::worker
