// Support for the tokenizer tests: the tokenizer under test, loaded once, and the reference
// side of the parity tests, which runs tests/dataloader/tiktoken_ids.mjs under
// node (npm tiktoken@1.0.22, fetched by scripts/fetch_deps.sh) and reads back its ids.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "dataloader/tokenizer.h"

namespace fullband::dataloader::testing {

struct ReferenceCase {
  std::string bytes;  // any bytes; ill-formed UTF-8 is replaced as WHATWG's TextDecoder does
  bool allow_special = false;
};

struct ReferenceIds {
  std::vector<uint32_t> ids;
  int64_t replaced = 0;  // U+FFFD the decoder produced
};

// tiktoken's ids for each case, in order (one node process for all of them).
StatusOr<std::vector<ReferenceIds>> TiktokenIds(const std::vector<ReferenceCase>& cases);

// tiktoken's bytes for every id below Tokenizer::kVocabSize (with Phi-4's specials), in order.
StatusOr<std::vector<std::string>> TiktokenTokenBytes();

// Writes the parity corpora (scripts/tokenizer_corpus.mjs) and tiktoken's ids for them into
// `dir`: <name>.txt and <name>.ids for name in {brown, linux-doc}.
Status WriteTiktokenCorpus(const std::string& dir);

// The tokenizer of Tokenizer::DefaultRanksPath(), loaded once; aborts naming the file when it
// cannot be loaded (scripts/fetch_deps.sh fetches it).
const Tokenizer& DefaultTokenizer();

// A file's bytes (NOT_FOUND naming it when it cannot be read).
StatusOr<std::string> ReadFileBytes(const std::string& path);

}  // namespace fullband::dataloader::testing
