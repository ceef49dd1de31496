// Validation and U+FFFD replacement following the Unicode well-formed byte sequence table
// (Table 3-7): the second byte's range depends on the lead byte (E0: A0..BF, ED: 80..9F,
// F0: 90..BF, F4: 80..8F), every other continuation byte is 80..BF.
#include "dataloader/utf8.h"

namespace fullband::dataloader {
namespace {

// How many bytes of the sequence starting at text[i] are a prefix of a well-formed sequence
// (*complete tells whether they form all of it). Returns 0 for a byte that cannot start one.
size_t WellFormedPrefix(std::string_view text, size_t i, bool* complete) {
  const auto b0 = static_cast<unsigned char>(text[i]);
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *complete = false;
    return 0;
  }
  size_t k = 1;
  for (; k <= need && i + k < text.size(); ++k) {
    const auto b = static_cast<unsigned char>(text[i + k]);
    if (b < lo || b > hi) break;
    lo = 0x80;
    hi = 0xBF;
  }
  *complete = k == need + 1;
  return k;
}

// The length of the run of ASCII bytes starting at text[i], eight bytes at a time.
size_t AsciiRun(std::string_view text, size_t i) {
  const size_t start = i;
  while (i + 8 <= text.size()) {
    uint64_t word;
    std::memcpy(&word, text.data() + i, 8);
    if (word & 0x8080808080808080ull) break;
    i += 8;
  }
  while (i < text.size() && static_cast<unsigned char>(text[i]) < 0x80) ++i;
  return i - start;
}

}  // namespace

size_t FirstInvalidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    i += AsciiRun(text, i);
    if (i >= text.size()) break;
    bool complete;
    const size_t k = WellFormedPrefix(text, i, &complete);
    if (!complete) return i;
    i += k;
  }
  return text.size();
}

int64_t AppendReplacingInvalidUtf8(std::string_view text, std::string* out) {
  int64_t replaced = 0;
  size_t i = 0;
  out->reserve(out->size() + text.size());
  while (i < text.size()) {
    const size_t valid_end = i + FirstInvalidUtf8(text.substr(i));
    out->append(text.data() + i, valid_end - i);
    i = valid_end;
    if (i >= text.size()) break;
    bool complete;
    const size_t k = WellFormedPrefix(text, i, &complete);
    out->append("\xEF\xBF\xBD");
    ++replaced;
    i += k == 0 ? 1 : k;
  }
  return replaced;
}

}  // namespace fullband::dataloader
