// ClassOf: a two-stage lookup (block index, then 2 bits per code point) over the generated
// tables in unicode_classes_data.inc.
#include "dataloader/unicode_classes.h"

namespace fullband::dataloader {
namespace {
#include "dataloader/unicode_classes_data.inc"
}  // namespace

CharClass ClassOf(char32_t cp) {
  if (cp > 0x10FFFF) return CharClass::kOther;
  const uint8_t* block = kClassStage2[kClassStage1[cp >> kClassBlockShift]];
  const uint32_t i = cp & ((1u << kClassBlockShift) - 1);
  return static_cast<CharClass>((block[i >> 2] >> (2 * (i & 3))) & 3);
}

}  // namespace fullband::dataloader
