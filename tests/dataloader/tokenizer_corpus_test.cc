// Tokenizer against the reference on real text and on every code point: the Brown corpus and
// Debian's linux-doc-6.1 reST sources (scripts/tokenizer_corpus.mjs, ~30 MB), and each Unicode
// scalar value in the contexts that tell its split class apart. Ids come from npm
// tiktoken@1.0.22 under node, computed in this run. Label `tokenizer` (about half a minute).
#include <gtest/gtest.h>

#include <cstring>

#include "dataloader/tokenizer.h"
#include "dataloader/utf8.h"
#include "tests/common/temp_dir.h"
#include "tests/dataloader/tiktoken_reference.h"

namespace fullband::dataloader {
namespace {

using fullband::testing::MakeTempDir;
using testing::ReadFileBytes;
using testing::ReferenceCase;
using testing::TiktokenIds;

// Where two id sequences first differ, with the text around it, for a readable failure.
std::string FirstDifference(const Tokenizer& t, const std::vector<uint32_t>& got,
                            const std::vector<uint32_t>& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  const size_t from = i >= 8 ? i - 8 : 0;
  auto context = [&](const std::vector<uint32_t>& ids) {
    std::string out;
    for (size_t k = from; k < std::min(ids.size(), i + 8); ++k) {
      out += std::to_string(ids[k]) + "(" +
             ::testing::PrintToString(std::string(t.TokenBytes(ids[k]))) + ") ";
    }
    return out;
  };
  return "first difference at id " + std::to_string(i) + " of " + std::to_string(want.size()) +
         "\n  fullband: " + context(got) + "\n  tiktoken: " + context(want);
}

TEST(TokenizerCorpus, Encode_BrownAndLinuxDoc_MatchTiktoken) {
  const Tokenizer& t = testing::DefaultTokenizer();
  const std::string dir = MakeTempDir();
  ASSERT_TRUE(testing::WriteTiktokenCorpus(dir).ok());
  size_t total_bytes = 0;
  for (const std::string name : {"brown", "linux-doc"}) {
    StatusOr<std::string> text = ReadFileBytes(dir + "/" + name + ".txt");
    StatusOr<std::string> raw_ids = ReadFileBytes(dir + "/" + name + ".ids");
    ASSERT_TRUE(text.ok() && raw_ids.ok()) << name;
    std::vector<uint32_t> want(raw_ids->size() / 4);
    std::memcpy(want.data(), raw_ids->data(), want.size() * 4);
    std::vector<uint32_t> got;
    t.Encode(*text, false, &got);
    EXPECT_EQ(got.size(), want.size()) << name;
    EXPECT_TRUE(got == want) << name << ": " << FirstDifference(t, got, want);
    total_bytes += text->size();
    std::printf("%s: %zu bytes, %zu tokens, equal: %s\n", name.c_str(), text->size(), want.size(),
                got == want ? "yes" : "no");
    std::remove((dir + "/" + name + ".txt").c_str());
    std::remove((dir + "/" + name + ".ids").c_str());
  }
  EXPECT_GE(total_bytes, 20u << 20) << "the parity corpus must hold at least 20 MB";
}

TEST(TokenizerCorpus, Encode_EveryCodePointInContext_MatchesTiktoken) {
  // Each scalar value c appears as "  c x", "1c23", "c's" and " c\n": contexts whose ids depend
  // on whether c is a letter, a number, white space or other (gen_unicode_classes.mjs).
  const Tokenizer& t = testing::DefaultTokenizer();
  std::vector<ReferenceCase> cases;
  for (char32_t block = 0; block <= 0x10FFFF; block += 0x8000) {
    std::string text;
    for (char32_t cp = block; cp < block + 0x8000; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      for (const char* context : {"  \x01x",
                                  "1\x01"
                                  "23",
                                  "\x01's", " \x01\n"}) {
        for (const char* p = context; *p != '\0'; ++p) {
          if (*p == '\x01') {
            AppendUtf8(cp, &text);
          } else {
            text += *p;
          }
        }
      }
    }
    cases.push_back({text});
  }
  StatusOr<std::vector<testing::ReferenceIds>> ref = TiktokenIds(cases);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<uint32_t> got;
    t.Encode(cases[i].bytes, false, &got);
    EXPECT_TRUE(got == (*ref)[i].ids) << "code points from U+" << std::hex << i * 0x8000 << ": "
                                      << FirstDifference(t, got, (*ref)[i].ids);
  }
}

}  // namespace
}  // namespace fullband::dataloader
