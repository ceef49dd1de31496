#include "worker/batch_source.h"

#include <algorithm>

namespace fullband::worker {

StatusOr<std::unique_ptr<BatchSource>> BatchSource::Open(const Config& config, int dp_rank,
                                                         int dp_size, int64_t first_step,
                                                         const dataloader::SamplerCursor* start) {
  const DataConfig& d = config.data;
  if (dp_size < 1 || d.batch_size % dp_size != 0) {
    return InvalidArgumentError("data.batch_size: " + std::to_string(d.batch_size) +
                                " is not divisible by parallel.dp = " + std::to_string(dp_size));
  }
  std::unique_ptr<BatchSource> src(new BatchSource);
  src->global_batch_ = d.batch_size;
  src->rows_ = d.batch_size / dp_size;
  src->dp_rank_ = dp_rank;
  src->dp_size_ = dp_size;
  src->next_step_ = first_step;
  src->cursor_.draws = static_cast<uint64_t>(first_step * d.batch_size);
  if (start != nullptr && start->draws != src->cursor_.draws) {
    return InvalidArgumentError(
        "sampler cursor: " + start->ToString() + " is not at step " + std::to_string(first_step) +
        " (" + std::to_string(src->cursor_.draws) + " draws with data.batch_size " +
        std::to_string(d.batch_size) + ")");
  }
  if (!d.path.empty()) {
    if (start != nullptr && !start->consumed.empty()) {
      return InvalidArgumentError("sampler cursor: " + start->ToString() +
                                  " is of token stores, and data.path is a token file");
    }
    FB_ASSIGN_OR_RETURN(TokenFile file,
                        TokenFile::Open(d.path, config.model.vocab_size, d.seq_len));
    src->file_ = std::make_unique<TokenFile>(std::move(file));
    src->seed_ = static_cast<uint64_t>(d.seed);
    src->description_ = std::to_string(src->file_->num_tokens()) + " tokens of " + d.path;
    return src;
  }
  if (d.sources.empty()) {
    return InvalidArgumentError(
        "data: name the training data, either data.path (a token file) or data.sources "
        "(token stores written by `fullband ingest`)");
  }
  FB_RETURN_IF_ERROR(src->OpenStores(config, first_step, start));
  return src;
}

Status BatchSource::OpenStores(const Config& config, int64_t first_step,
                               const dataloader::SamplerCursor* start) {
  const DataConfig& d = config.data;
  std::vector<int64_t> sizes;
  std::vector<double> weights;
  std::vector<const dataloader::TokenStore*> stores;
  int64_t sequences = 0;
  for (const DataSource& s : d.sources) {
    FB_ASSIGN_OR_RETURN(std::unique_ptr<dataloader::RocksDbTokenStore> store,
                        dataloader::RocksDbTokenStore::Open(s.store));
    if (store->num_sequences() == 0) {
      return FailedPreconditionError(s.store + ": the store holds no full sequence yet");
    }
    if (tokenizer_hash_.empty()) tokenizer_hash_ = store->metadata().tokenizer_hash;
    sizes.push_back(store->num_sequences());
    weights.push_back(s.weight);
    sequences += store->num_sequences();
    stores.push_back(store.get());
    stores_.push_back(std::move(store));
  }
  FB_ASSIGN_OR_RETURN(dataloader::Sampler sampler,
                      dataloader::Sampler::Create(sizes, weights, static_cast<uint64_t>(d.seed)));
  dataloader::ReaderOptions ro;
  ro.batch_size = rows_;
  ro.seq_len = d.seq_len;
  ro.vocab_size = config.model.vocab_size;
  ro.prefetch = d.prefetch;
  ro.dp_rank = dp_rank_;
  ro.dp_size = dp_size_;
  if (start != nullptr) {
    FB_RETURN_IF_ERROR(sampler.CheckCursor(*start));
    cursor_ = *start;
  } else {
    cursor_ = sampler.CursorAt(static_cast<uint64_t>(first_step * global_batch_));
  }
  FB_ASSIGN_OR_RETURN(reader_,
                      dataloader::BatchReader::Create(stores, std::move(sampler), cursor_, ro));
  description_ = std::to_string(sequences) + " sequences in " + std::to_string(d.sources.size()) +
                 " token store(s)";
  return OkStatus();
}

Status BatchSource::Read(const StepAssignment& step, int32_t* tokens) {
  if (step.step != next_step_ || step.sequences != global_batch_ ||
      step.sampler_cursor != static_cast<uint64_t>(step.step * global_batch_)) {
    return FailedPreconditionError(
        "batch source: step " + std::to_string(step.step) + " (cursor " +
        std::to_string(step.sampler_cursor) + ", " + std::to_string(step.sequences) +
        " sequences) is not the next step of this run, step " + std::to_string(next_step_) +
        " (cursor " + std::to_string(next_step_ * global_batch_) + ", " +
        std::to_string(global_batch_) + " sequences)");
  }
  ++next_step_;
  if (file_) {
    file_->ReadBatch(seed_, static_cast<int64_t>(step.sampler_cursor) + dp_rank_ * rows_, rows_,
                     tokens);
    cursor_.draws = static_cast<uint64_t>(next_step_ * global_batch_);
    return OkStatus();
  }
  FB_ASSIGN_OR_RETURN(dataloader::Batch batch, reader_->Next());
  std::copy(batch.tokens.begin(), batch.tokens.end(), tokens);
  cursor_ = batch.cursor_after;
  return OkStatus();
}

}  // namespace fullband::worker
