// UTF-8 helpers of the tokenizer: encoding a code point, finding the first ill-formed byte,
// replacing ill-formed sequences by U+FFFD one per maximal subpart (Unicode §3.9 "U+FFFD
// substitution of maximal subparts", as WHATWG's decoder and Python's errors="replace" do), and
// decoding one code point of input already known to be valid. Pure functions: thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace fullband::dataloader {

// The offset of the first byte that does not belong to a well-formed UTF-8 sequence (an
// overlong form, a surrogate, a code point above U+10FFFF, a stray continuation byte or a
// sequence cut short), or text.size() when all of `text` is valid.
size_t FirstInvalidUtf8(std::string_view text);

// Appends `text` to *out with every maximal subpart of an ill-formed sequence replaced by
// U+FFFD (EF BF BD); returns how many replacements were made.
int64_t AppendReplacingInvalidUtf8(std::string_view text, std::string* out);

// Appends the UTF-8 encoding of `cp` (a scalar value: not a surrogate, at most U+10FFFF).
inline void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | cp >> 6));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | cp >> 12));
    out->push_back(static_cast<char>(0x80 | (cp >> 6 & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | cp >> 18));
    out->push_back(static_cast<char>(0x80 | (cp >> 12 & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp >> 6 & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Decodes the code point at p[0..] of valid UTF-8 and sets *len to its byte length (1..4).
inline char32_t DecodeValidUtf8(const unsigned char* p, int* len) {
  const unsigned char b0 = p[0];
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  if (b0 < 0xE0) {
    *len = 2;
    return (char32_t{b0} & 0x1F) << 6 | (p[1] & 0x3F);
  }
  if (b0 < 0xF0) {
    *len = 3;
    return (char32_t{b0} & 0x0F) << 12 | char32_t{p[1] & 0x3Fu} << 6 | (p[2] & 0x3F);
  }
  *len = 4;
  return (char32_t{b0} & 0x07) << 18 | char32_t{p[1] & 0x3Fu} << 12 | char32_t{p[2] & 0x3Fu} << 6 |
         (p[3] & 0x3F);
}

}  // namespace fullband::dataloader
