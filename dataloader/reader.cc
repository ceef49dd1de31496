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
  if (options.prefetch > 0) reader->thread_ = std::thread([r = reader.get()] { r->Prefetch(); });
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
  if (thread_.joinable()) thread_.join();
}

StatusOr<Batch> BatchReader::ReadBatch(SamplerCursor* cursor, std::vector<Sampler::Draw>* draws,
                                       std::vector<uint32_t>* ids) const {
  const int64_t b = options_.batch_size, n = options_.seq_len + 1;
  sampler_.NextBatch(options_.dp_rank, options_.dp_size, b, cursor, draws);
  Batch batch;
  batch.tokens.resize(static_cast<size_t>(b * n));
  ids->resize(static_cast<size_t>(b * n));
  // One read per store, in draw order within it.
  std::vector<int64_t> indices;
  std::vector<int64_t> rows;
  for (size_t s = 0; s < stores_.size(); ++s) {
    indices.clear();
    rows.clear();
    for (size_t i = 0; i < draws->size(); ++i) {
      if ((*draws)[i].source == static_cast<int>(s)) {
        indices.push_back((*draws)[i].index);
        rows.push_back(static_cast<int64_t>(i));
      }
    }
    if (indices.empty()) continue;
    FB_RETURN_IF_ERROR(stores_[s]->Read(indices, ids->data()));
    for (size_t k = 0; k < rows.size(); ++k) {
      const uint32_t* from = ids->data() + k * n;
      std::copy(from, from + n, batch.tokens.begin() + rows[k] * n);
    }
  }
  batch.cursor_after = *cursor;
  return batch;
}

void BatchReader::Prefetch() {
  std::vector<Sampler::Draw> draws;
  std::vector<uint32_t> ids;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      room_.wait(lock,
                 [&] { return stop_ || static_cast<int64_t>(queue_.size()) < options_.prefetch; });
      if (stop_) return;
    }
    StatusOr<Batch> batch = ReadBatch(&next_, &draws, &ids);
    const bool failed = !batch.ok();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(batch));
    }
    ready_.notify_one();
    if (failed) return;  // the error is the last thing this reader says
  }
}

StatusOr<Batch> BatchReader::Next() {
  if (options_.prefetch == 0) {
    if (failed_) return FailedPreconditionError("reader: stopped after a read error");
    std::vector<Sampler::Draw> draws;
    std::vector<uint32_t> ids;
    StatusOr<Batch> batch = ReadBatch(&next_, &draws, &ids);
    failed_ = !batch.ok();
    return batch;
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (failed_) return FailedPreconditionError("reader: stopped after a read error");
  ready_.wait(lock, [&] { return !queue_.empty(); });
  StatusOr<Batch> batch = std::move(queue_.front());
  queue_.pop_front();
  failed_ = !batch.ok();
  lock.unlock();
  room_.notify_one();
  return batch;
}

}  // namespace fullband::dataloader
