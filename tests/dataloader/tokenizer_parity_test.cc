// Tokenizer against the reference, live: every case is encoded by npm tiktoken@1.0.22 under node
// (tiktoken_ids.mjs) and by fullband, and the ids must be equal. These are the edge cases of the
// cl100k split and of ill-formed UTF-8; tokenizer_corpus_test.cc runs the real-text corpora.
#include <gtest/gtest.h>

#include <random>

#include "dataloader/tokenizer.h"
#include "dataloader/utf8.h"
#include "tests/dataloader/tiktoken_reference.h"

namespace fullband::dataloader {
namespace {

using testing::ReferenceCase;
using testing::ReferenceIds;
using testing::TiktokenIds;

class TokenizerParityTest : public ::testing::Test {
 protected:
  // Encodes every case both ways; reports the first few mismatches with their text.
  static void ExpectParity(const std::vector<ReferenceCase>& cases) {
    StatusOr<std::vector<ReferenceIds>> ref = TiktokenIds(cases);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    ASSERT_EQ(ref->size(), cases.size());
    int mismatches = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      std::vector<uint32_t> ids;
      Tokenizer::EncodeStats stats;
      tokenizer().Encode(cases[i].bytes, cases[i].allow_special, &ids, &stats);
      if (ids == (*ref)[i].ids && stats.replaced == (*ref)[i].replaced) continue;
      if (++mismatches <= 5) {
        ADD_FAILURE() << "case " << i << " " << ::testing::PrintToString(cases[i].bytes)
                      << (cases[i].allow_special ? " (allow_special)" : "")
                      << "\n  fullband: " << ::testing::PrintToString(ids) << " replaced "
                      << stats.replaced
                      << "\n  tiktoken: " << ::testing::PrintToString((*ref)[i].ids) << " replaced "
                      << (*ref)[i].replaced;
      }
    }
    EXPECT_EQ(mismatches, 0) << "of " << cases.size() << " cases";
  }

  // Every string of up to `max_len` items drawn from `alphabet`.
  static std::vector<ReferenceCase> AllStrings(const std::vector<std::string>& alphabet,
                                               int max_len) {
    std::vector<ReferenceCase> cases = {{""}};
    std::vector<std::string> level = {""};
    for (int len = 1; len <= max_len; ++len) {
      std::vector<std::string> next;
      for (const auto& prefix : level) {
        for (const auto& a : alphabet) next.push_back(prefix + a);
      }
      for (const auto& s : next) cases.push_back({s});
      level = std::move(next);
    }
    return cases;
  }

  static const Tokenizer& tokenizer() { return testing::DefaultTokenizer(); }
};

TEST_F(TokenizerParityTest, Encode_WhitespaceRuns_MatchTiktoken) {
  ExpectParity(AllStrings(
      {" ", "  ", "\t", "\xC2\xA0", "\xE3\x80\x80", "x", "1", ".", "\xC3\xA9", "\xE4\xB8\xAD"}, 4));
}

TEST_F(TokenizerParityTest, Encode_CrLfRuns_MatchTiktoken) {
  ExpectParity(AllStrings({"\r", "\n", "\r\n", " ", "\t", "a", "!", "7"}, 5));
}

TEST_F(TokenizerParityTest, Encode_Digits_MatchTiktoken) {
  std::vector<ReferenceCase> cases;
  for (int len = 1; len <= 13; ++len) {
    std::string digits;
    for (int i = 0; i < len; ++i) digits += static_cast<char>('0' + (i * 7 + 3) % 10);
    for (const std::string around : {"", " ", "x", "$", "-", "."}) {
      cases.push_back({around + digits + around});
      cases.push_back({digits + "abc" + digits});
    }
  }
  // Numbers outside ASCII: Arabic-Indic, fullwidth, superscript, fractions, Roman numerals.
  for (const std::string n :
       {"\xD9\xA3\xD9\xA4\xD9\xA5\xD9\xA6", "\xEF\xBC\x91\xEF\xBC\x92", "x\xC2\xB2\xC2\xB3",
        "1\xC2\xBD", "\xE2\x85\xA7\xE2\x85\xA8 12", "3.14159 2,718 1e10 0x1F"}) {
    cases.push_back({n});
  }
  ExpectParity(cases);
}

TEST_F(TokenizerParityTest, Encode_Contractions_MatchTiktoken) {
  std::vector<std::string> bodies;
  for (const std::string c : {"s", "t", "re", "ve", "m", "ll", "d"}) {
    // Every upper/lower-case spelling.
    for (int mask = 0; mask < (1 << c.size()); ++mask) {
      std::string s = c;
      for (size_t i = 0; i < s.size(); ++i) {
        if (mask >> i & 1) s[i] = static_cast<char>(s[i] - 'a' + 'A');
      }
      bodies.push_back(s);
    }
  }
  bodies.push_back("\xC5\xBF");  // U+017F LATIN SMALL LETTER LONG S folds to s
  bodies.push_back("x");
  bodies.push_back("");
  std::vector<ReferenceCase> cases;
  for (const auto& body : bodies) {
    for (const std::string before : {"", "I", "it", " ", "1", "'"}) {
      for (const std::string after : {"", "x", "ing", " ", "'s", "!", "\n"}) {
        cases.push_back({before + "'" + body + after});
      }
    }
  }
  cases.push_back({"I'LL we'VE they'Re she's He'S don't DON'T y'all rock'n'roll"});
  ExpectParity(cases);
}

TEST_F(TokenizerParityTest, Encode_CjkEmojiAndCombiningMarks_MatchTiktoken) {
  ExpectParity({
      {"\xE4\xB8\xAD\xE6\x96\x87\xE6\xB5\x8B\xE8\xAF\x95\xEF\xBC\x8C\xE6\x97\xA5\xE6\x9C\xAC"
       "\xE8\xAA\x9E\xE3\x81\xA8\xE3\x81\xB2\xE3\x82\x89\xE3\x81\x8C\xE3\x81\xAA "
       "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4"},
      {"\xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91"
       "\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 \xF0\x9F\x87\xBA\xF0\x9F\x87\xB8!"},
      {"cafe\xCC\x81 e\xCC\x81\xCC\x81\xCC\x81 a\xCC\x8A\xCC\x8A "
       "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87"},
      {"\xD8\xA7\xD9\x84\xD8\xB9\xD8\xB1\xD8\xA8\xD9\x8A\xD8\xA9 \xD7\xA2\xD7\x91\xD7\xA8\xD7\x99"
       "\xD7\xAA \xCE\x95\xCE\xBB\xCE\xBB\xCE\xB7\xCE\xBD\xCE\xB9\xCE\xBA\xCE\xAC"},
      {"x\xCC\x81y \xCC\x81x \xCC\x81\n \xE2\x83\xA3"},
  });
}

TEST_F(TokenizerParityTest, Encode_UnusualSpacesAndFormatCharacters_MatchTiktoken) {
  // U+0085 (White_Space), U+00A0, U+FEFF and U+180E (format, not white space), U+2028/2029,
  // U+200B, U+3000, U+1680.
  ExpectParity(AllStrings({"\xC2\x85", "\xC2\xA0", "\xEF\xBB\xBF", "\xE1\xA0\x8E", "\xE2\x80\xA8",
                           "\xE2\x80\x8B", "\xE3\x80\x80", " ", "a", "\n"},
                          3));
}

TEST_F(TokenizerParityTest, Encode_IllFormedUtf8_MatchesTiktokenOnTheDecodedText) {
  std::vector<ReferenceCase> cases;
  for (const std::string bad :
       {"\xED\xA0\x80", "\xED\xBF\xBF", "\xED\xA0\x80\xED\xB0\x80", "\xC0\x80", "\xC1\xBF",
        "\xE0\x80\x80", "\xF0\x80\x80\x80", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xFE\xFF",
        "\x80", "\xBF\xBF", "\xE2\x82", "\xF0\x9F\x98", "\xC3", "\xEF\xBF\xBD",
        "a\xF1\x80\x80\xE1\x80\xC2"
        "b\x80"
        "c\x80\xBF"
        "d"}) {
    for (const std::string before : {"", "x", " ", "1", "\n"}) {
      for (const std::string after : {"", "y", " ", "\xE2\x82\xAC", "'s"}) {
        cases.push_back({before + bad + after});
      }
    }
  }
  cases.push_back({std::string("a\0b\0\0 \0", 8)});
  cases.push_back({std::string(" \0\0\0x", 5)});
  ExpectParity(cases);
}

TEST_F(TokenizerParityTest, Encode_RandomBytes_MatchTiktoken) {
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<int> len(0, 64), byte(0, 255), mostly_ascii(0, 3);
  std::vector<ReferenceCase> cases;
  for (int i = 0; i < 3000; ++i) {
    std::string s(len(rng), '\0');
    for (char& c : s) c = static_cast<char>(mostly_ascii(rng) == 0 ? byte(rng) : byte(rng) & 0x7F);
    cases.push_back({s});
  }
  ExpectParity(cases);
}

TEST_F(TokenizerParityTest, Encode_RandomCodePoints_MatchTiktoken) {
  // Random code points of the whole range (unassigned and private-use ones included) among
  // ASCII letters, digits, spaces and punctuation.
  std::mt19937_64 rng(2);
  std::uniform_int_distribution<uint32_t> any(0x80, 0x10FFFF), len(1, 30), kind(0, 3);
  const std::string ascii = "ab Z9 .'\n\t";
  std::vector<ReferenceCase> cases;
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    for (uint32_t k = len(rng); k > 0; --k) {
      if (kind(rng) > 0) {
        s += ascii[rng() % ascii.size()];
        continue;
      }
      uint32_t cp = any(rng);
      if (cp >= 0xD800 && cp <= 0xDFFF) cp -= 0x800;
      AppendUtf8(cp, &s);
    }
    cases.push_back({s});
  }
  ExpectParity(cases);
}

TEST_F(TokenizerParityTest, Encode_LongPieces_MatchTiktoken) {
  // Pieces longer than the stack-array merge handles (64 bytes) take the heap merge.
  std::mt19937_64 rng(4);
  std::vector<ReferenceCase> cases;
  for (int len : {60, 64, 65, 100, 300, 2000}) {
    std::string ab, word, spaces(len, ' '), bangs(len, '!'), digits, cjk;
    for (int i = 0; i < len; ++i) {
      ab += "ab"[rng() % 2];
      word += "etaoinshrdlucmfw"[rng() % 16];
      digits += static_cast<char>('0' + rng() % 10);
      cjk += "\xE4\xB8\xAD";
    }
    for (const std::string& s : {ab, word, " " + word, spaces + "x", spaces, bangs + "\n\n", digits,
                                 cjk, std::string(len, 'a'), "\n" + spaces + "\n"}) {
      cases.push_back({s});
    }
  }
  ExpectParity(cases);
}

TEST_F(TokenizerParityTest, Encode_SpecialTokensAllowed_MatchTiktokenWithPhi4Specials) {
  std::vector<ReferenceCase> cases;
  for (const std::string s :
       {"<|endoftext|>", "a<|endoftext|>b", "<|endoftext|><|endoftext|>", "  <|im_start|>  ",
        "hello\n<|im_start|>user<|im_sep|>hi<|im_end|>\n", "<|<|endoftext|>|>", "<|foo|>",
        "<|endoftext", "<|fim_prefix|>x<|fim_suffix|>y<|fim_middle|>", "<|dummy_0|><|dummy_85|>",
        "<|endofprompt|>.", "<|dummy_86|><|dummy_87|><|dummy_88|>", "x <|endoftext|>'s",
        "<|im_start|>\xED\xA0\x80<|im_end|>"}) {
    cases.push_back({s, /*allow_special=*/true});
    cases.push_back({s, /*allow_special=*/false});
  }
  ExpectParity(cases);
}

TEST_F(TokenizerParityTest, Decode_EveryId_GivesTiktokensBytes) {
  StatusOr<std::vector<std::string>> want = testing::TiktokenTokenBytes();
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  ASSERT_EQ(want->size(), static_cast<size_t>(Tokenizer::kVocabSize));
  int mismatches = 0;
  for (uint32_t id = 0; id < Tokenizer::kVocabSize; ++id) {
    StatusOr<std::string> got = tokenizer().Decode(std::vector<uint32_t>{id});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    if (*got != (*want)[id] && ++mismatches <= 5) {
      ADD_FAILURE() << "id " << id << ": " << ::testing::PrintToString(*got) << " vs tiktoken "
                    << ::testing::PrintToString((*want)[id]);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace fullband::dataloader
