#include "dataloader/reader.h"

#include <algorithm>

namespace fullband::dataloader {

StatusOr<std::unique_ptr<BatchReader>> BatchReader::Create(std::vector<const TokenStore*> stores,
                                                           Sampler sampler, SamplerCursor start,
                                                           const ReaderOptions& options) {
  if (static_cast<int>(stores.size()) != sampler.num_sources()) {
    return InvalidArgumentError("reader: " + std::to_string(stores.size()) +
                                " stores for a sampler of " +
                                std::to_string(sampler.num_sources()) + " sources");
  }
  if (options.batch_size < 1) return InvalidArgumentError("reader: batch_size must be >= 1");
  if (options.dp_size < 1 || options.dp_rank < 0 || options.dp_rank >= options.dp_size) {
    return InvalidArgumentError("reader: DP rank " + std::to_string(options.dp_rank) + " of " +
                                std::to_string(options.dp_size));
  }
  if (options.threads < 1 || options.threads > 64) {
    return InvalidArgumentError("reader: threads " + std::to_string(options.threads) +
                                " outside [1, 64]");
  }
  for (const TokenStore* s : stores) {
    if (s->seq_len() != options.seq_len) {
      return InvalidArgumentError(
          s->name() + ": the store holds sequences of seq_len " + std::to_string(s->seq_len()) +
          ", training uses data.seq_len " + std::to_string(options.seq_len) +
          " (ingest again with --seq-len " + std::to_string(options.seq_len) + ")");
    }
    if (s->vocab_size() > options.vocab_size) {
      return InvalidArgumentError(
          s->name() + ": the store's vocabulary of " + std::to_string(s->vocab_size()) +
          " ids does not fit model.vocab_size " + std::to_string(options.vocab_size));
    }
  }
  FB_RETURN_IF_ERROR(sampler.CheckCursor(start));
  std::unique_ptr<BatchReader> reader(
      new BatchReader(std::move(stores), std::move(sampler), std::move(start), options));
  if (options.prefetch > 0) {
    for (int i = 0; i < std::max(1, options.threads); ++i) {
      reader->threads_.emplace_back([r = reader.get()] { r->Prefetch(); });
    }
  }
  return reader;
}

BatchReader::BatchReader(std::vector<const TokenStore*> stores, Sampler sampler,
                         SamplerCursor start, const ReaderOptions& options)
    : stores_(std::move(stores)),
      sampler_(std::move(sampler)),
      options_(options),
      next_(std::move(start)) {}

BatchReader::~BatchReader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  room_.notify_all();
  for (std::thread& t : threads_) t.join();
}

StatusOr<Batch> BatchReader::ReadBatch(const std::vector<Sampler::Draw>& draws,
                                       std::vector<uint32_t>* scratch) const {
  const size_t n = static_cast<size_t>(options_.seq_len + 1);
  Batch batch;
  batch.tokens.resize(draws.size() * n);
  // int32 and uint32 may alias; ids are < 2^31, so the bits are the same number.
  uint32_t* out = reinterpret_cast<uint32_t*>(batch.tokens.data());
  std::vector<int64_t> indices;
  if (stores_.size() == 1) {  // straight into the batch
    for (const Sampler::Draw& d : draws) indices.push_back(d.index);
    FB_RETURN_IF_ERROR(stores_[0]->Read(indices, out));
    return batch;
  }
  // One read per store, then each record to its row.
  std::vector<size_t> rows;
  for (size_t s = 0; s < stores_.size(); ++s) {
    indices.clear();
    rows.clear();
    for (size_t i = 0; i < draws.size(); ++i) {
      if (draws[i].source == static_cast<int>(s)) {
        indices.push_back(draws[i].index);
        rows.push_back(i);
      }
    }
    if (indices.empty()) continue;
    scratch->resize(indices.size() * n);
    FB_RETURN_IF_ERROR(stores_[s]->Read(indices, scratch->data()));
    for (size_t k = 0; k < rows.size(); ++k) {
      std::copy(scratch->begin() + k * n, scratch->begin() + (k + 1) * n, out + rows[k] * n);
    }
  }
  return batch;
}

void BatchReader::Prefetch() {
  std::vector<Sampler::Draw> draws;
  std::vector<uint32_t> scratch;
  for (;;) {
    int64_t number;
    SamplerCursor after;
    {
      std::unique_lock<std::mutex> lock(mu_);
      room_.wait(lock, [&] {
        return stop_ || (!error_read_ && claimed_ < delivered_ + options_.prefetch);
      });
      if (stop_) return;
      // Drawing is cheap and must be sequential: do it under the lock, read outside it.
      number = claimed_++;
      sampler_.NextBatch(options_.dp_rank, options_.dp_size, options_.batch_size, &next_, &draws);
      after = next_;
    }
    StatusOr<Batch> batch = ReadBatch(draws, &scratch);
    if (batch.ok()) batch->cursor_after = std::move(after);
    bool awaited;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!batch.ok()) error_read_ = true;
      done_.emplace(number, std::move(batch));
      awaited = number == awaited_;
    }
    // Waking a thread costs the waker microseconds (an interrupt to the other CPU); only the
    // batch Next is blocked on is worth one.
    if (awaited) ready_.notify_one();
  }
}

StatusOr<Batch> BatchReader::Next() {
  if (options_.prefetch == 0) {
    if (failed_) return FailedPreconditionError("reader: stopped after a read error");
    std::vector<Sampler::Draw> draws;
    std::vector<uint32_t> scratch;
    sampler_.NextBatch(options_.dp_rank, options_.dp_size, options_.batch_size, &next_, &draws);
    StatusOr<Batch> batch = ReadBatch(draws, &scratch);
    if (batch.ok()) batch->cursor_after = next_;
    failed_ = !batch.ok();
    return batch;
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (failed_) return FailedPreconditionError("reader: stopped after a read error");
  // Batch `delivered_` is claimed by now or will be: a failed earlier batch would have been
  // delivered first, and claims stop only after a failure.
  auto it = done_.find(delivered_);
  if (it == done_.end()) {
    awaited_ = delivered_;
    ready_.wait(lock, [&] { return done_.count(delivered_) > 0; });
    awaited_ = -1;
    it = done_.find(delivered_);
  }
  StatusOr<Batch> batch = std::move(it->second);
  done_.erase(it);
  ++delivered_;
  failed_ = !batch.ok();
  lock.unlock();
  room_.notify_one();  // one batch more may be claimed
  return batch;
}

}  // namespace fullband::dataloader
