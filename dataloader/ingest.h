// Ingest: text files, JSONL files, directories and stdin → Phi-4 token ids → packed records of
// S + 1 tokens in a RocksDB token store (docs/DESIGN.md §5, dataloader/FORMAT.md).
//
// Every document is followed by <|endoftext|>; documents flow across record boundaries and the
// leftover tokens (the tail) stay in the store's metadata, where the next ingest continues them.
// Each input is one source; sources are committed atomically in groups (Note [Ingest commit]),
// and an input whose bytes are already in the store is skipped, so re-running an ingest adds
// nothing.
// Tokenization runs on all cores; the records are the same for any thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "dataloader/tokenizer.h"

namespace fullband::dataloader {

enum class InputFormat { kAuto, kText, kJsonl };  // auto: *.jsonl / *.ndjson are JSONL

struct IngestOptions {
  std::vector<std::string> inputs;  // files, directories (recursively, in path order), "-"
  std::string out;                  // the store's directory (created if missing)
  int64_t seq_len = 0;              // S: records hold S + 1 tokens
  InputFormat format = InputFormat::kAuto;
  std::string text_field = "text";  // the JSONL field holding a document's text
  int threads = 0;                  // tokenizer threads; 0 = every core
  bool allow_special = false;       // special-token text becomes special ids
  int64_t chunk_bytes = 1 << 20;    // text tokenized per parallel round
};

struct IngestProgress {
  uint64_t bytes = 0;  // input bytes read so far
  int64_t documents = 0;
  int64_t tokens = 0;
  double seconds = 0;
};

struct IngestResult {
  int64_t sources_added = 0;
  int64_t sources_skipped = 0;  // already in the store
  std::vector<std::string> skipped;
  IngestProgress totals;    // of the added sources
  int64_t replaced = 0;     // invalid UTF-8 sequences replaced by U+FFFD
  int64_t sequences = 0;    // records in the store afterwards
  int64_t tail_tokens = 0;  // tokens waiting in the tail afterwards
};

// NOT_FOUND for a missing input; INVALID_ARGUMENT naming file:line for a JSONL line that is not
// an object with a string `text_field`, or for bad options; FAILED_PRECONDITION when the store
// was written with another tokenizer or seq_len; UNAVAILABLE when another ingest holds the
// store. Sources committed before an error stay committed. `progress` (may be empty) is called
// from the calling thread about twice a second.
StatusOr<IngestResult> Ingest(const Tokenizer& tokenizer, const IngestOptions& options,
                              const std::function<void(const IngestProgress&)>& progress);

// Splits `text` into pieces that tokenize independently: the cl100k pre-tokenizer always
// breaks between a '\n' and a following ASCII letter, so encoding the pieces one by one gives
// the ids of the whole. Pieces are about `target` bytes (longer where no break exists).
std::vector<std::string_view> SplitForEncoding(std::string_view text, size_t target);

}  // namespace fullband::dataloader
