// Ingest: the store's token stream is every document's ids followed by <|endoftext|>, in input
// order, packed into records with the rest in the tail — for any thread count and chunking;
// re-ingesting adds nothing; a bad JSONL line is an error naming file:line.
#include "dataloader/ingest.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "dataloader/token_store.h"

namespace fullband::dataloader {
namespace {

namespace fs = std::filesystem;

const Tokenizer& Phi4() {
  static const Tokenizer* tok = [] {
    StatusOr<Tokenizer> t = Tokenizer::Load(Tokenizer::DefaultRanksPath());
    if (!t.ok()) {
      ADD_FAILURE() << t.status().ToString() << " (scripts/fetch_deps.sh fetches the ranks)";
      std::abort();
    }
    return new Tokenizer(std::move(*t));
  }();
  return *tok;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class IngestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fullband_ingest_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ + "/docs/sub");
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  // Every id in the store: the records in order, then the tail.
  static std::vector<uint32_t> Stream(const std::string& store_path) {
    auto store = RocksDbTokenStore::Open(store_path);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    const int64_t n = (*store)->num_sequences(), len = (*store)->seq_len() + 1;
    std::vector<int64_t> all(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) all[i] = i;
    std::vector<uint32_t> ids(static_cast<size_t>(n * len));
    EXPECT_TRUE((*store)->Read(all, ids.data()).ok());
    const auto& tail = (*store)->metadata().tail;
    ids.insert(ids.end(), tail.begin(), tail.end());
    return ids;
  }

  static void AppendDoc(const std::string& text, std::vector<uint32_t>* ids) {
    Phi4().Encode(text, false, ids);
    ids->push_back(Tokenizer::kEndOfText);
  }

  IngestOptions Options(std::vector<std::string> inputs, const std::string& out) {
    IngestOptions o;
    o.inputs = std::move(inputs);
    o.out = dir_ + "/" + out;
    o.seq_len = 31;
    o.threads = 2;
    return o;
  }

  std::string dir_;
};

TEST(SplitForEncoding, PiecesEncodeToTheIdsOfTheWhole) {
  const std::string text = ReadFile("/usr/share/common-licenses/GPL-3");
  ASSERT_GT(text.size(), 10000u);
  const auto parts = SplitForEncoding(text, 500);
  ASSERT_GT(parts.size(), 20u);
  std::string joined;
  std::vector<uint32_t> piecewise, whole;
  for (std::string_view p : parts) {
    joined.append(p);
    Phi4().Encode(p, false, &piecewise);
  }
  EXPECT_EQ(joined, text);
  Phi4().Encode(text, false, &whole);
  EXPECT_EQ(piecewise, whole);
}

TEST_F(IngestTest, Stream_IsEveryDocumentAndItsEndOfText_InInputOrder) {
  const std::string a = "First file.\nIt has two lines.\n";
  const std::string b = "  Second file, with   spaces and digits 12345 and ünïcödé.";
  Write("docs/a.txt", a);
  Write("docs/sub/b.txt", b);
  Write("docs/.hidden", "never read");
  Write("docs/c.jsonl",
        "{\"text\": \"json doc one\", \"id\": 1}\n\n{\"text\": \"json doc two\\n\"}\n");
  StatusOr<IngestResult> r = Ingest(Phi4(), Options({dir_ + "/docs"}, "store"), nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->sources_added, 3);
  EXPECT_EQ(r->totals.documents, 4);
  std::vector<uint32_t> expect;  // path order: a.txt, c.jsonl, sub/b.txt
  AppendDoc(a, &expect);
  AppendDoc("json doc one", &expect);
  AppendDoc("json doc two\n", &expect);
  AppendDoc(b, &expect);
  EXPECT_EQ(r->totals.tokens, static_cast<int64_t>(expect.size()));
  EXPECT_EQ(Stream(dir_ + "/store"), expect);
  EXPECT_EQ(r->sequences, static_cast<int64_t>(expect.size()) / 32);
  EXPECT_EQ(r->tail_tokens, static_cast<int64_t>(expect.size()) % 32);
}

TEST_F(IngestTest, ThreadsAndChunking_DoNotChangeTheStore) {
  const std::string gpl = Write("gpl.txt", ReadFile("/usr/share/common-licenses/GPL-3"));
  std::string jsonl;
  std::vector<uint32_t> expect;
  AppendDoc(ReadFile(gpl), &expect);
  for (int i = 0; i < 200; ++i) {
    jsonl += "{\"text\": \"document " + std::to_string(i) + " says\\nhello\\tworld\"}\n";
    AppendDoc("document " + std::to_string(i) + " says\nhello\tworld", &expect);
  }
  const std::string docs = Write("docs.jsonl", jsonl);
  IngestOptions one = Options({gpl, docs}, "one");
  one.threads = 1;
  IngestOptions many = Options({gpl, docs}, "many");
  many.threads = 3;
  many.chunk_bytes = 2000;  // dozens of rounds, big documents split
  ASSERT_TRUE(Ingest(Phi4(), one, nullptr).ok());
  ASSERT_TRUE(Ingest(Phi4(), many, nullptr).ok());
  const std::vector<uint32_t> a = Stream(one.out);
  EXPECT_EQ(a, expect);
  EXPECT_EQ(Stream(many.out), expect);
}

TEST_F(IngestTest, ManyIdsPerByte_OverflowTheChunkIdStore_StreamUnchanged) {
  // One 2.8 MB chunk (no line break to cut at) of a lone continuation byte (U+FFFD) before
  // each letter: one id per byte. A chunk's id_store has room for one id per two bytes of
  // its buffer, which holds the text and the next 1 MB read in whole 2 MB pages (Note [Ingest
  // memory]); these ids do not fit, so the batch keeps them in a vector of its own.
  std::string text;
  for (int i = 0; i < 1400000; ++i) {
    text += '\x80';
    text += (i % 2 == 0) ? 'a' : 'z';
  }
  std::vector<uint32_t> expect;
  AppendDoc(text, &expect);
  const size_t page = size_t{2} << 20;
  const size_t buffer = (text.size() + (size_t{1} << 20) + page - 1) / page * page;
  ASSERT_GT(expect.size(), buffer / 2);
  IngestOptions o = Options({Write("fffd.txt", text)}, "store");
  o.seq_len = 2047;
  StatusOr<IngestResult> r = Ingest(Phi4(), o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Stream(o.out), expect);
}

TEST_F(IngestTest, SameInputsAgain_AddNothing_NewInputsContinueTheTail) {
  const std::string a = Write("a.txt", "alpha beta gamma delta epsilon zeta eta theta");
  const std::string b = Write("b.txt", "iota kappa lambda mu nu xi omicron pi rho");
  ASSERT_TRUE(Ingest(Phi4(), Options({a}, "s"), nullptr).ok());
  StatusOr<IngestResult> again = Ingest(Phi4(), Options({a}, "s"), nullptr);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->sources_added, 0);
  EXPECT_EQ(again->sources_skipped, 1);
  StatusOr<IngestResult> more = Ingest(Phi4(), Options({a, b}, "s"), nullptr);
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(more->sources_added, 1);
  std::vector<uint32_t> expect;
  AppendDoc(ReadFile(a), &expect);
  AppendDoc(ReadFile(b), &expect);
  EXPECT_EQ(Stream(dir_ + "/s"), expect);
  auto store = RocksDbTokenStore::Open(dir_ + "/s");
  EXPECT_EQ((*store)->metadata().sources.size(), 2u);
  EXPECT_TRUE((*store)->Verify(nullptr)->bad_records == 0);
}

TEST_F(IngestTest, BadJsonlLine_IsAnErrorNamingFileAndLine_EarlierSourcesStay) {
  const std::string good = Write("good.txt", "a good document");
  const std::string bad = Write("bad.jsonl", "{\"text\": \"fine\"}\n{\"text\": 3}\n");
  StatusOr<IngestResult> r = Ingest(Phi4(), Options({good, bad}, "s"), nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(bad + ":2: no string field \"text\""), std::string::npos)
      << r.status().ToString();
  auto store = RocksDbTokenStore::Open(dir_ + "/s");
  ASSERT_TRUE(store.ok());
  ASSERT_EQ((*store)->metadata().sources.size(), 1u);
  EXPECT_EQ((*store)->metadata().sources[0].name, good);
  const std::string not_json = Write("x.jsonl", "{\"text\": \"a\"}\nnot json\n");
  EXPECT_NE(Ingest(Phi4(), Options({not_json}, "s2"), nullptr)
                .status()
                .message()
                .find(not_json + ":2: not a JSON value"),
            std::string::npos);
}

// Lines are parsed where they were read, inside the chunk: the bytes after a line (the next
// line, or the padding after the chunk) are never part of it.
TEST_F(IngestTest, JsonlLines_ParseInPlace_EndingAtTheirNewline) {
  const std::string last_unterminated =
      Write("u.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"text\": \"c");
  const std::string cut = Write("cut.jsonl", "{\"text\": \"one\"\n}\n");
  const std::string no_newline = Write("n.jsonl", "{\"text\": \"x\"}\n{\"text\": \"last\"}");
  for (int64_t chunk_bytes : {int64_t{1}, int64_t{1} << 20}) {
    IngestOptions o = Options({last_unterminated}, "u" + std::to_string(chunk_bytes));
    o.chunk_bytes = chunk_bytes;
    StatusOr<IngestResult> r = Ingest(Phi4(), o, nullptr);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(last_unterminated + ":3: not a JSON value"),
              std::string::npos)
        << r.status().ToString();
    o = Options({cut}, "c" + std::to_string(chunk_bytes));
    o.chunk_bytes = chunk_bytes;
    r = Ingest(Phi4(), o, nullptr);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(cut + ":1: not a JSON value"), std::string::npos)
        << r.status().ToString();
    o = Options({no_newline}, "n" + std::to_string(chunk_bytes));
    o.chunk_bytes = chunk_bytes;
    r = Ingest(Phi4(), o, nullptr);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::vector<uint32_t> expect;
    AppendDoc("x", &expect);
    AppendDoc("last", &expect);
    EXPECT_EQ(Stream(o.out), expect);
  }
}

// Into a new store the first records wait in memory while it is created; into an existing one
// they go straight to it. Either way a failing input is dropped alone.
TEST_F(IngestTest, BadJsonlLine_InANewOrExistingStore_DropsOnlyThatInput) {
  std::string long_text;
  for (int i = 0; i < 200; ++i) long_text += "word number " + std::to_string(i) + " ";
  const std::string first = Write("first.txt", long_text);
  const std::string good = Write("good.txt", long_text + "and more");
  std::string lines;
  for (int i = 0; i < 8; ++i) lines += "{\"text\": \"" + long_text + "\"}\n";
  const std::string bad = Write("bad.jsonl", lines + "[1]\n");
  ASSERT_TRUE(Ingest(Phi4(), Options({first}, "s"), nullptr).ok());
  for (const char* out : {"new", "s"}) {
    IngestOptions o = Options({good, bad}, out);
    o.chunk_bytes = 256;  // a line a chunk: bad.jsonl's first lines are packed before it fails
    StatusOr<IngestResult> r = Ingest(Phi4(), o, nullptr);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(bad + ":9:"), std::string::npos) << r.status().ToString();
  }
  std::vector<uint32_t> expect;
  AppendDoc(long_text + "and more", &expect);
  EXPECT_EQ(Stream(dir_ + "/new"), expect);
  expect.clear();
  AppendDoc(long_text, &expect);
  AppendDoc(long_text + "and more", &expect);
  EXPECT_EQ(Stream(dir_ + "/s"), expect);
  auto store = RocksDbTokenStore::Open(dir_ + "/s");
  EXPECT_EQ((*store)->metadata().sources.size(), 2u);
  EXPECT_EQ((*store)->Verify(nullptr)->extra_records, 0);
}

TEST_F(IngestTest, ManyFiles_AreOneSourceEach_AndVerify) {
  std::vector<uint32_t> expect;
  for (int i = 0; i < 300; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "docs/f%03d.txt", i);
    const std::string text = "file number " + std::to_string(i) + "\nends here.";
    Write(name, text);
    AppendDoc(text, &expect);
  }
  StatusOr<IngestResult> r = Ingest(Phi4(), Options({dir_ + "/docs"}, "s"), nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->sources_added, 300);
  EXPECT_EQ(Stream(dir_ + "/s"), expect);
  auto store = RocksDbTokenStore::Open(dir_ + "/s");
  ASSERT_EQ((*store)->metadata().sources.size(), 300u);
  EXPECT_EQ((*store)->metadata().sources[299].name, dir_ + "/docs/f299.txt");
  EXPECT_EQ((*store)->Verify(nullptr)->bad_records, 0);
}

TEST_F(IngestTest, OtherTextField_IsRead) {
  const std::string f = Write("c.jsonl", "{\"content\": \"from another field\"}\n");
  IngestOptions o = Options({f}, "s");
  o.text_field = "content";
  ASSERT_TRUE(Ingest(Phi4(), o, nullptr).ok());
  std::vector<uint32_t> expect;
  AppendDoc("from another field", &expect);
  EXPECT_EQ(Stream(o.out), expect);
}

TEST_F(IngestTest, InvalidUtf8_IsReplacedAndCounted) {
  const std::string f = Write("bad.txt", std::string("ok \xff\xfe then \xe2\x82 cut"));
  StatusOr<IngestResult> r = Ingest(Phi4(), Options({f}, "s"), nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->replaced, 3);  // FF, FE, and the truncated E2 82
  std::vector<uint32_t> expect;
  AppendDoc("ok \xEF\xBF\xBD\xEF\xBF\xBD then \xEF\xBF\xBD cut", &expect);
  EXPECT_EQ(Stream(dir_ + "/s"), expect);
}

// A new store is created while the first chunks are encoded: an input too short for one
// record, or an empty one, still makes a store that opens; a store path that cannot be made is
// an error naming it.
TEST_F(IngestTest, NewStore_FromShortOrEmptyInput_Opens_UnmakeablePathIsAnError) {
  const std::string empty = Write("empty.txt", "");
  const std::string one = Write("one.txt", "one word");
  StatusOr<IngestResult> r = Ingest(Phi4(), Options({empty}, "s0"), nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->sources_added, 1);
  EXPECT_EQ(r->totals.documents, 0);  // an empty file holds no document
  EXPECT_TRUE(Stream(dir_ + "/s0").empty());
  ASSERT_TRUE(Ingest(Phi4(), Options({one}, "s1"), nullptr).ok());
  std::vector<uint32_t> expect;
  AppendDoc("one word", &expect);
  EXPECT_EQ(Stream(dir_ + "/s1"), expect);

  StatusOr<IngestResult> bad = Ingest(Phi4(), Options({one}, "one.txt/store"), nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(dir_ + "/one.txt/store"), std::string::npos)
      << bad.status().ToString();
}

TEST_F(IngestTest, MissingInputOrOtherSeqLen_AreRefused) {
  EXPECT_EQ(Ingest(Phi4(), Options({dir_ + "/nothing.txt"}, "s"), nullptr).status().code(),
            StatusCode::kNotFound);
  const std::string f = Write("a.txt", "text");
  ASSERT_TRUE(Ingest(Phi4(), Options({f}, "s"), nullptr).ok());
  IngestOptions other = Options({Write("b.txt", "more")}, "s");
  other.seq_len = 63;
  EXPECT_EQ(Ingest(Phi4(), other, nullptr).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace fullband::dataloader
