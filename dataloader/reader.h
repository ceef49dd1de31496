// BatchReader: the training batches of one data-parallel rank, read from token stores in the
// order the Sampler gives, by a background thread that keeps `prefetch` batches ready.
//
// Batches come out in stream order whatever the timing, also with several reading threads;
// each carries the sampler cursor after it, which is what a checkpoint saves: a reader created
// at that cursor continues with exactly the next batch. A read error (a corrupt record) is
// returned by Next for the batch it hit and stops the reader. Next is called from one thread;
// the stores must outlive the reader.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/allocators.h"
#include "common/status.h"
#include "dataloader/sampler.h"
#include "dataloader/token_store.h"

namespace fullband::dataloader {

struct Batch {
  std::vector<int32_t, UninitializedAllocator<int32_t>> tokens;  // (B, T + 1)
  SamplerCursor cursor_after;                                    // where the stream continues
};

struct ReaderOptions {
  int64_t batch_size = 8;  // B: sequences of this rank per batch
  int64_t seq_len = 0;     // T; every store must hold records of T + 1 tokens
  int64_t vocab_size = 0;  // the model's; every store's vocabulary must fit in it
  int dp_rank = 0;
  int dp_size = 1;
  int64_t prefetch = 4;  // batches kept ready (0: read synchronously in Next)
  int threads = 1;       // background threads reading batches (with prefetch > 0)
};

class BatchReader {
 public:
  // INVALID_ARGUMENT when a store's seq_len or vocabulary does not match the options, or the
  // cursor does not belong to the sampler.
  static StatusOr<std::unique_ptr<BatchReader>> Create(std::vector<const TokenStore*> stores,
                                                       Sampler sampler, SamplerCursor start,
                                                       const ReaderOptions& options);
  ~BatchReader();
  BatchReader(const BatchReader&) = delete;
  BatchReader& operator=(const BatchReader&) = delete;

  // The next batch of this rank (blocks until it is read).
  StatusOr<Batch> Next();

 private:
  BatchReader(std::vector<const TokenStore*> stores, Sampler sampler, SamplerCursor start,
              const ReaderOptions& options);
  // Reads the records of `draws` into a batch.
  StatusOr<Batch> ReadBatch(const std::vector<Sampler::Draw>& draws,
                            std::vector<uint32_t>* scratch) const;
  void Prefetch();

  std::vector<const TokenStore*> stores_;
  Sampler sampler_;
  ReaderOptions options_;

  std::mutex mu_;
  SamplerCursor next_;                       // the cursor of batch number claimed_
  int64_t claimed_ = 0;                      // batches handed to reading threads so far
  int64_t delivered_ = 0;                    // batches returned by Next so far
  std::map<int64_t, StatusOr<Batch>> done_;  // read, not yet delivered, by batch number
  int64_t awaited_ = -1;                     // the batch Next is blocked on, or -1
  std::condition_variable ready_;            // batch awaited_ was read
  std::condition_variable room_;             // a batch was delivered, or stop was asked
  bool stop_ = false;
  bool error_read_ = false;  // a thread hit an error: claim nothing more
  bool failed_ = false;      // Next returned an error
  std::vector<std::thread> threads_;
};

}  // namespace fullband::dataloader
