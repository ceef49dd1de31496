#include "dataloader/ingest.h"

#include <fcntl.h>
#include <simdjson.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_set>

#include "common/allocators.h"
#include "dataloader/reader.h"
#include "dataloader/token_store.h"

namespace fullband::dataloader {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Input {
  std::string name;  // as the user gave it, or the file under a directory; "-" for stdin
  bool is_stdin = false;
  bool jsonl = false;
};

bool IsJsonlName(const std::string& path) {
  const std::string ext = fs::path(path).extension().string();
  return ext == ".jsonl" || ext == ".ndjson";
}

StatusOr<std::vector<Input>> ExpandInputs(const IngestOptions& options) {
  std::vector<Input> inputs;
  auto add = [&](const std::string& path, bool is_stdin) {
    const bool jsonl = options.format == InputFormat::kJsonl ||
                       (options.format == InputFormat::kAuto && IsJsonlName(path));
    inputs.push_back(Input{path, is_stdin, jsonl});
  };
  for (const std::string& in : options.inputs) {
    if (in == "-") {
      add("-", true);
      continue;
    }
    std::error_code ec;
    const fs::file_status st = fs::status(in, ec);
    if (ec || !fs::exists(st)) return NotFoundError("input " + in + ": no such file or directory");
    if (fs::is_directory(st)) {
      std::vector<std::string> files;
      for (fs::recursive_directory_iterator it(in, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (!name.empty() && name[0] == '.') {
          if (it->is_directory()) it.disable_recursion_pending();
          continue;
        }
        if (it->is_regular_file()) files.push_back(it->path().string());
      }
      if (ec) return NotFoundError("input " + in + ": " + ec.message());
      std::sort(files.begin(), files.end());
      for (const std::string& f : files) add(f, false);
    } else {
      add(in, false);
    }
  }
  if (inputs.empty()) return InvalidArgumentError("ingest: no input given");
  return inputs;
}

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Reads a file or stdin in blocks, hashing and counting the bytes.
class ByteSource {
 public:
  static StatusOr<ByteSource> Open(const Input& input) {
    if (input.is_stdin) return ByteSource(input.name, 0, false);
    const int fd = ::open(input.name.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return NotFoundError("input " + input.name + ": " + std::strerror(errno));
    }
    return ByteSource(input.name, fd, true);
  }
  ByteSource(ByteSource&& o) noexcept
      : name_(std::move(o.name_)),
        fd_(o.fd_),
        owned_(o.owned_),
        state_(o.state_),
        bytes_(o.bytes_) {
    o.owned_ = false;
    o.state_ = nullptr;
  }
  ~ByteSource() {
    if (owned_) ::close(fd_);
    if (state_) XXH64_freeState(state_);
  }

  // Reads up to `max` bytes into `to`; 0 at the end of the input.
  StatusOr<size_t> Read(char* to, size_t max) {
    ssize_t got;
    do {
      got = ::read(fd_, to, max);
    } while (got < 0 && errno == EINTR);
    if (got < 0) {
      return InternalError("input " + name_ + ": read failed: " + std::strerror(errno));
    }
    XXH64_update(state_, to, static_cast<size_t>(got));
    bytes_ += static_cast<uint64_t>(got);
    return static_cast<size_t>(got);
  }
  uint64_t bytes() const { return bytes_; }
  std::string digest() const { return Hex64(XXH64_digest(state_)); }

 private:
  ByteSource(std::string name, int fd, bool owned)
      : name_(std::move(name)), fd_(fd), owned_(owned), state_(XXH64_createState()) {
    XXH64_reset(state_, 0);
  }
  std::string name_;
  int fd_;
  bool owned_;
  XXH64_state_t* state_;
  uint64_t bytes_ = 0;
};

// The xxh64 of a whole file, to skip it before tokenizing when the store already has it.
StatusOr<std::string> HashFile(const Input& input) {
  FB_ASSIGN_OR_RETURN(ByteSource src, ByteSource::Open(input));
  std::vector<char> block(4 << 20);
  for (;;) {
    FB_ASSIGN_OR_RETURN(size_t got, src.Read(block.data(), block.size()));
    if (got == 0) break;
  }
  return src.digest();
}

// Note [Ingest pipeline]: the calling thread reads an input straight into a chunk's buffer
// (about chunk_bytes: whole JSONL lines, or a text document cut where encoding may restart),
// splits the chunk's pieces into batches of about kBatchBytes and queues them for the encoder
// threads; while up to kChunksInFlight chunks are encoded, it packs the ids of the oldest into
// records. Batches are small, so every encoder keeps busy up to the last one; chunks, with
// their text and id buffers, are reused, so a long ingest allocates (and page-faults) nothing
// after its first chunks.
//
// Note [Ingest memory]: a page's first touch is costly on some virtual machines (where the
// host shadows the guest's page tables; docs/PERF.md, "Page faults"), and a short ingest
// touches all of its buffers for the first time: five chunks of text and of ids, about 10 MB,
// are 2,500 faults in 4 KB pages, a visible share of a 25 MB ingest. So a chunk's text
// and its ids live in huge pages (common/allocators.h), allocated once per chunk and reused:
// each encoder encodes a batch into its own reused buffer and copies the ids into the next
// free range of the chunk's id_store, which has room for one id per two bytes of the text
// buffer, in whole huge pages; a batch that finds no room (text of mostly multi-token
// characters) keeps its ids in a vector of its own.
constexpr size_t kBatchBytes = 64 << 10;
constexpr size_t kChunksInFlight = 4;

struct Chunk {
  struct Piece {
    size_t offset = 0, size = 0;
    bool ends_document = false;  // <|endoftext|> follows it
    int64_t json_line = 0;       // > 0: a JSONL line (this number) holding one document
  };
  struct Batch {
    size_t first = 0, end = 0;       // pieces
    std::span<const uint32_t> ids;   // in id_store, or in overflow
    std::vector<uint32_t> overflow;  // the ids when id_store had no room left for them
    int64_t replaced = 0;
    Status error;
  };
  // text[0, size) holds the chunk's bytes (and any bytes past it, the start of the next);
  // once read, at least simdjson::SIMDJSON_PADDING initialized bytes follow them, so a JSONL
  // line parses in place (simdjson reads past a document's end, whatever the bytes there).
  std::vector<char, UninitializedHugePageAllocator<char>> text;
  size_t size = 0;
  std::vector<Piece> pieces;
  std::vector<Batch> batches;  // the first num_batches are this round's
  size_t num_batches = 0;
  // The batches' ids: each encoded batch claims the next ids_used range (Note [Ingest memory]).
  std::vector<uint32_t, UninitializedHugePageAllocator<uint32_t>> id_store;
  std::atomic<size_t> ids_used{0};
  int64_t documents = 0;
  const std::string* source = nullptr;  // for errors
  size_t pending = 0;                   // batches not yet encoded; guarded by the pool's mutex

  void Reset() {
    size = 0;
    pieces.clear();
    num_batches = 0;
    documents = 0;
  }
  // Makes text at least n bytes long. Its capacity grows in whole huge pages, so a chunk
  // allocates its buffer once (two pages for 1 MB chunks) and reuses it for every round,
  // instead of vector's small steps that each touch fresh pages (Note [Ingest memory]).
  void Fit(size_t n) {
    if (text.size() >= n) return;
    if (text.capacity() < n) {
      text.reserve((n + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes);
    }
    text.resize(n);
  }
  std::string_view view(const Piece& p) const { return {text.data() + p.offset, p.size}; }
  // Ends the chunk's text at `size`: the padding after it is made readable.
  void Seal() {
    Fit(size + simdjson::SIMDJSON_PADDING);
    std::memset(text.data() + size, ' ', simdjson::SIMDJSON_PADDING);
  }
  void Add(size_t offset, size_t size, bool ends_document, int64_t json_line = 0) {
    pieces.push_back(Piece{offset, size, ends_document, json_line});
    documents += ends_document;
  }
  // Adds text[offset, offset + size) of a document, in pieces that encode independently.
  void AddText(size_t offset, size_t size, size_t target, bool ends_document) {
    const std::vector<std::string_view> parts =
        SplitForEncoding(std::string_view(text.data() + offset, size), target);
    for (size_t i = 0; i < parts.size(); ++i) {
      Add(static_cast<size_t>(parts[i].data() - text.data()), parts[i].size(),
          ends_document && i + 1 == parts.size());
    }
    if (parts.empty() && ends_document) Add(offset, 0, true);
  }
  // Groups the pieces into batches of about kBatchBytes.
  void MakeBatches() {
    // Room for one id per two bytes (ordinary text has about four per token), in whole pages,
    // for as much text as the buffer holds: the store is allocated once too.
    const size_t page_ids = kHugePageBytes / sizeof(uint32_t);
    const size_t room = (text.capacity() / 2 + page_ids - 1) / page_ids * page_ids;
    if (id_store.size() < room) id_store = decltype(id_store)(room);
    ids_used = 0;
    num_batches = 0;
    size_t bytes = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (bytes == 0) {
        if (batches.size() == num_batches) batches.emplace_back();
        batches[num_batches].first = i;
      }
      bytes += pieces[i].size + 1;
      if (bytes >= kBatchBytes || i + 1 == pieces.size()) {
        batches[num_batches++].end = i + 1;
        bytes = 0;
      }
    }
  }
};

// Tokenizes one batch: its ids in order, <|endoftext|> after each document. JSONL lines are
// parsed here, so that parsing runs in parallel too; INVALID_ARGUMENT names source:line.
// The ids go to `scratch` (the thread's, reused), then to the chunk's id_store.
void EncodeBatch(const Tokenizer& tok, const IngestOptions& options, simdjson::dom::parser& parser,
                 Chunk& chunk, Chunk::Batch& batch, std::vector<uint32_t>& scratch) {
  Tokenizer::EncodeStats stats;
  scratch.clear();
  batch.ids = {};
  batch.error = OkStatus();
  for (size_t i = batch.first; i < batch.end; ++i) {
    const Chunk::Piece& piece = chunk.pieces[i];
    const std::string_view text = chunk.view(piece);
    if (piece.json_line > 0) {
      auto fail = [&](const std::string& what) {
        batch.error = InvalidArgumentError(*chunk.source + ":" + std::to_string(piece.json_line) +
                                           ": " + what);
      };
      simdjson::dom::element doc;
      simdjson::dom::object object;
      std::string_view field;
      // In place, without a copy: the chunk's text is padded (Chunk::text).
      if (const auto err = parser.parse(text.data(), text.size(), false).get(doc)) {
        return fail(std::string("not a JSON value (") + simdjson::error_message(err) + ")");
      }
      if (doc.get_object().get(object)) return fail("not a JSON object");
      if (object[options.text_field].get_string().get(field)) {
        return fail("no string field \"" + options.text_field + "\"");
      }
      tok.Encode(field, options.allow_special, &scratch, &stats);
    } else {
      tok.Encode(text, options.allow_special, &scratch, &stats);
    }
    if (piece.ends_document) scratch.push_back(Tokenizer::kEndOfText);
  }
  batch.replaced = stats.replaced;
  const size_t n = scratch.size();
  if (const size_t at = chunk.ids_used.fetch_add(n); at + n <= chunk.id_store.size()) {
    std::copy(scratch.begin(), scratch.end(),
              chunk.id_store.begin() + static_cast<std::ptrdiff_t>(at));
    batch.ids = std::span<const uint32_t>(chunk.id_store.data() + at, n);
  } else {
    batch.overflow.assign(scratch.begin(), scratch.end());
    batch.ids = batch.overflow;
  }
}

// `threads` encoder threads taking batches from one queue, oldest chunk first.
class EncoderPool {
 public:
  EncoderPool(const Tokenizer& tok, const IngestOptions& options) : tok_(tok), options_(options) {
    for (int i = 0; i < options.threads; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~EncoderPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  void Submit(Chunk* chunk) {
    chunk->MakeBatches();
    {
      std::lock_guard<std::mutex> lock(mu_);
      chunk->pending = chunk->num_batches;
      for (size_t b = 0; b < chunk->num_batches; ++b) queue_.emplace_back(chunk, b);
    }
    work_.notify_all();
  }
  // Blocks until every batch of `chunk` is encoded.
  void Wait(Chunk* chunk) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return chunk->pending == 0; });
  }

 private:
  void Loop() {
    simdjson::dom::parser parser;  // one per thread: parsers are not thread-safe
    std::vector<uint32_t> scratch;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      const auto [chunk, b] = queue_.front();
      queue_.pop_front();
      lock.unlock();
      EncodeBatch(tok_, options_, parser, *chunk, chunk->batches[b], scratch);
      lock.lock();
      if (--chunk->pending == 0) done_.notify_all();
    }
  }

  const Tokenizer& tok_;
  const IngestOptions& options_;
  std::mutex mu_;
  std::condition_variable work_, done_;
  std::deque<std::pair<Chunk*, size_t>> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// Reads one input into chunks and hands them on (`emit`), in order; `take` gives the chunk to
// fill next (reset, its buffer reused).
class DocumentReader {
 public:
  DocumentReader(const Input& input, const IngestOptions& options, ByteSource* src)
      : input_(input), options_(options), src_(src) {}

  Status Run(const std::function<Chunk*()>& take, const std::function<Status(Chunk*)>& emit) {
    const size_t chunk_bytes = static_cast<size_t>(options_.chunk_bytes);
    const size_t block = std::min<size_t>(1 << 20, chunk_bytes);
    const size_t target = std::min(kBatchBytes, chunk_bytes);
    Chunk* chunk = take();
    size_t start = 0;  // where the unfinished line or text begins
    bool more = true;
    while (more) {
      chunk->Fit(chunk->size + block);
      FB_ASSIGN_OR_RETURN(const size_t got, src_->Read(chunk->text.data() + chunk->size, block));
      more = got > 0;
      const size_t scan = chunk->size;
      chunk->size += got;
      if (input_.jsonl) {
        start = TakeLines(chunk, start, scan, !more);
      } else if (!more) {  // a whole text file is one document
        if (src_->bytes() > 0) chunk->AddText(start, chunk->size - start, target, true);
        start = chunk->size;
      } else {  // cut where encoding may restart
        const size_t cut = LastBreak(chunk, std::max(start, scan));
        if (cut > start) {
          chunk->AddText(start, cut - start, target, false);
          start = cut;
        }
      }
      // A chunk without a finished piece yet (a line or break-free stretch longer than
      // chunk_bytes) grows instead.
      if ((chunk->size >= chunk_bytes && start > 0) || !more) {
        // The unfinished part moves to the front of the next chunk.
        Chunk* next = more ? take() : nullptr;
        if (next) {
          const size_t rest = chunk->size - start;
          next->Fit(rest + block);
          std::memcpy(next->text.data(), chunk->text.data() + start, rest);
          next->size = rest;
          chunk->size = start;
          start = 0;
        }
        chunk->Seal();
        FB_RETURN_IF_ERROR(emit(chunk));
        chunk = next;
      }
    }
    return OkStatus();
  }

 private:
  // The end of the last "\n" in text[from, size) that is followed by an ASCII letter, or 0.
  static size_t LastBreak(const Chunk* chunk, size_t from) {
    const char* text = chunk->text.data();
    for (size_t i = chunk->size; i-- > std::max<size_t>(from, 1);) {
      const unsigned char c = static_cast<unsigned char>(text[i]);
      if (text[i - 1] == '\n' && ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')) return i;
    }
    return 0;
  }

  // Adds the complete lines from `start` as documents (parsed later, in parallel), looking for
  // line ends from `scan` on; returns where the unfinished line begins.
  size_t TakeLines(Chunk* chunk, size_t start, size_t scan, bool at_end) {
    const char* text = chunk->text.data();
    for (;;) {
      const void* nl = std::memchr(text + scan, '\n', chunk->size - scan);
      size_t end;
      if (nl) {
        end = static_cast<size_t>(static_cast<const char*>(nl) - text);
      } else if (at_end && start < chunk->size) {
        end = chunk->size;
      } else {
        return start;
      }
      ++line_;
      const std::string_view line(text + start, end - start);
      if (line.find_first_not_of(" \t\r") != std::string_view::npos) {
        chunk->Add(start, end - start, true, line_);
      }
      start = scan = std::min(end + 1, chunk->size);
    }
  }

  const Input& input_;
  const IngestOptions& options_;
  ByteSource* src_;
  int64_t line_ = 0;
};

}  // namespace

std::vector<std::string_view> SplitForEncoding(std::string_view text, size_t target) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (text.size() - start > target) {
    size_t cut = std::string_view::npos;
    for (size_t i = start + target; i + 1 < text.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(text[i + 1]);
      if (text[i] == '\n' && (c | 0x20) >= 'a' && (c | 0x20) <= 'z') {
        cut = i + 1;
        break;
      }
    }
    if (cut == std::string_view::npos) break;
    parts.push_back(text.substr(start, cut - start));
    start = cut;
  }
  if (start < text.size()) parts.push_back(text.substr(start));
  return parts;
}

namespace {

// Where packed records go (Note [Opening a new store]): the store's writer, or memory while a
// new store is still being opened on another thread.
class RecordSink {
 public:
  RecordSink(const IngestOptions& options, TokenStoreWriter::Identity identity,
             std::string description)
      : out_(options.out),
        identity_(std::move(identity)),
        description_(std::move(description)),
        record_(options.seq_len + 1) {}

  // Note [Opening a new store]: creating a store takes several synced writes. A store that does
  // not exist yet has no sources to skip and no tail to continue, so it is created on another
  // thread while the first chunks are read, encoded and packed; records packed before it is open
  // wait in memory (a few MB: opening is slower still while both cores encode). (A store another
  // process makes in between is found when it opens, and the ingest stops with an error rather than
  // pack onto a tail it did not start from.)
  Status Start() {
    auto open = [this] { return TokenStoreWriter::Open(out_, identity_, description_); };
    if (fs::exists(fs::path(out_) / "CURRENT")) {
      FB_ASSIGN_OR_RETURN(writer_, open());
      return OkStatus();
    }
    staged_.reserve(kHugePageBytes / sizeof(uint32_t));
    opening_ = std::async(std::launch::async, open);
    return OkStatus();
  }

  // The writer: waits for a store being opened and moves the staged records into it.
  StatusOr<TokenStoreWriter*> Writer() {
    if (writer_) return writer_.get();
    FB_ASSIGN_OR_RETURN(writer_, opening_.get());
    const StoreMetadata& m = writer_->metadata();
    if (m.num_sequences > 0 || !m.tail.empty() || !m.sources.empty()) {
      return UnavailableError("ingest: store " + out_ +
                              " was created by another process while this ingest started; "
                              "run it again");
    }
    FB_RETURN_IF_ERROR(writer_->Append(staged_));
    staged_ = Staged();
    return writer_.get();
  }
  TokenStoreWriter* open_writer() const { return writer_.get(); }  // null while opening

  Status Append(std::span<const uint32_t> records) {
    if (!writer_ && opening_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      staged_.insert(staged_.end(), records.begin(), records.end());
      return OkStatus();
    }
    FB_ASSIGN_OR_RETURN(TokenStoreWriter * w, Writer());
    return w->Append(records);
  }
  // Records appended (or staged) since the last commit: a mark for RollbackTo.
  int64_t appended() const {
    return writer_ ? writer_->appended() : static_cast<int64_t>(staged_.size()) / record_;
  }
  Status RollbackTo(int64_t mark) {
    if (writer_) return writer_->RollbackTo(mark);
    staged_.resize(static_cast<size_t>(mark * record_));
    return OkStatus();
  }

 private:
  // Full records packed before the store opened (in huge pages: Note [Ingest memory]).
  using Staged = std::vector<uint32_t, HugePageAllocator<uint32_t>>;

  std::string out_;
  TokenStoreWriter::Identity identity_;
  std::string description_;
  int64_t record_;
  std::unique_ptr<TokenStoreWriter> writer_;
  std::future<StatusOr<std::unique_ptr<TokenStoreWriter>>> opening_;
  Staged staged_;
};

// One ingest: its inputs one at a time through the pipeline (Note [Ingest pipeline]) into the
// sink, the sources committed in groups (Note [Ingest commit]), progress, and the result.
class IngestRun {
 public:
  IngestRun(const Tokenizer& tokenizer, const IngestOptions& options, RecordSink* sink,
            const std::function<void(const IngestProgress&)>& progress)
      : options_(options),
        record_(options.seq_len + 1),
        sink_(sink),
        progress_(progress),
        pool_(tokenizer, options) {
    for (auto& c : chunks_) c = std::make_unique<Chunk>();
    if (const TokenStoreWriter* w = sink_->open_writer()) {
      pending_ = w->metadata().tail;
      for (const StoreSource& s : w->metadata().sources) sizes_.insert(s.bytes);
    }
  }

  // Adds `input`, uncommitted, unless the store has its bytes already. On an error the input
  // is rolled back.
  Status Add(const Input& input) {
    std::error_code ec;
    const uint64_t size = input.is_stdin ? 0 : fs::file_size(input.name, ec);
    if (!input.is_stdin && (ec || sizes_.count(size))) {
      FB_ASSIGN_OR_RETURN(std::string digest, HashFile(input));
      if (AlreadyIn(digest)) return Skip(input);
    }
    FB_ASSIGN_OR_RETURN(ByteSource src, ByteSource::Open(input));
    StoreSource stats;
    stats.name = input.name;
    const int64_t mark = sink_->appended();
    const std::vector<uint32_t> pending_at_start = pending_;
    const auto undo = [&] {  // forget this input
      pending_ = pending_at_start;
      live_.documents -= stats.documents;
      live_.tokens -= stats.tokens;
      return sink_->RollbackTo(mark);
    };
    if (Status read = ReadAndPack(input, &src, &stats); !read.ok()) {
      FB_RETURN_IF_ERROR(undo());
      return read;
    }
    stats.bytes = src.bytes();
    stats.xxh64 = src.digest();
    if (AlreadyIn(stats.xxh64)) {  // stdin whose bytes were ingested before
      FB_RETURN_IF_ERROR(undo());
      return Skip(input);
    }
    uncommitted_.push_back(stats);
    added_.insert(stats.xxh64);
    sizes_.insert(stats.bytes);
    uncommitted_bytes_ += stats.bytes;
    ++result_.sources_added;
    result_.totals.bytes += stats.bytes;
    result_.totals.documents += stats.documents;
    result_.totals.tokens += stats.tokens;
    result_.replaced += stats.replaced;
    return OkStatus();
  }

  // Sources are committed every kCommitBytes of input or kCommitSeconds, and at the end.
  Status CommitIfDue() {
    constexpr uint64_t kCommitBytes = 64 << 20;
    constexpr double kCommitSeconds = 10;
    if (uncommitted_bytes_ >= kCommitBytes ||
        std::chrono::duration<double>(Clock::now() - last_commit_).count() >= kCommitSeconds) {
      return Commit();
    }
    return OkStatus();
  }
  Status Commit() {
    if (uncommitted_.empty()) return OkStatus();
    FB_ASSIGN_OR_RETURN(TokenStoreWriter * w, sink_->Writer());
    FB_RETURN_IF_ERROR(w->Commit(pending_, uncommitted_));
    uncommitted_.clear();
    uncommitted_bytes_ = 0;
    last_commit_ = Clock::now();
    return OkStatus();
  }

  StatusOr<IngestResult> Finish() {
    FB_RETURN_IF_ERROR(Commit());
    // An empty input still makes the store.
    FB_ASSIGN_OR_RETURN(TokenStoreWriter * w, sink_->Writer());
    FB_RETURN_IF_ERROR(w->Close());
    result_.totals.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    live_ = result_.totals;
    Report(true);
    result_.sequences = w->metadata().num_sequences;
    result_.tail_tokens = static_cast<int64_t>(w->metadata().tail.size());
    return result_;
  }

 private:
  bool AlreadyIn(const std::string& digest) const {
    const TokenStoreWriter* w = sink_->open_writer();
    return (w != nullptr && w->HasSource(digest)) || added_.count(digest) > 0;
  }
  Status Skip(const Input& input) {
    ++result_.sources_skipped;
    result_.skipped.push_back(input.name);
    return OkStatus();
  }

  // Reads the input into chunks, encodes them on the pool, and packs the ids of each, oldest
  // first, keeping one chunk free for the reader while the others are encoded.
  Status ReadAndPack(const Input& input, ByteSource* src, StoreSource* stats) {
    std::deque<Chunk*> inflight;
    size_t next_free = 0;
    DocumentReader reader(input, options_, src);
    Status read = reader.Run(
        [&] {
          Chunk* c = chunks_[next_free++ % chunks_.size()].get();
          c->Reset();
          c->source = &input.name;
          return c;
        },
        [&](Chunk* chunk) -> Status {
          stats->documents += chunk->documents;
          live_.documents += chunk->documents;
          pool_.Submit(chunk);
          inflight.push_back(chunk);
          while (inflight.size() + 1 >= chunks_.size()) {
            Chunk* oldest = inflight.front();
            inflight.pop_front();
            FB_RETURN_IF_ERROR(PackChunk(oldest, stats));
          }
          live_.bytes = result_.totals.bytes + src->bytes();
          Report(false);
          return OkStatus();
        });
    while (!inflight.empty()) {  // also after an error: no batch may outlive its chunk's use
      Chunk* oldest = inflight.front();
      inflight.pop_front();
      if (read.ok()) {
        read = PackChunk(oldest, stats);
      } else {
        pool_.Wait(oldest);
      }
    }
    return read;
  }

  // Waits for the chunk's batches and packs their ids.
  Status PackChunk(Chunk* chunk, StoreSource* stats) {
    pool_.Wait(chunk);
    for (size_t b = 0; b < chunk->num_batches; ++b) {
      const Chunk::Batch& batch = chunk->batches[b];
      FB_RETURN_IF_ERROR(batch.error);
      stats->replaced += batch.replaced;
      FB_RETURN_IF_ERROR(Pack(batch.ids, stats));
    }
    return OkStatus();
  }

  // Records straight from the encoded ids; pending_ holds the unfinished one.
  Status Pack(std::span<const uint32_t> ids, StoreSource* stats) {
    stats->tokens += static_cast<int64_t>(ids.size());
    live_.tokens += static_cast<int64_t>(ids.size());
    const size_t record = static_cast<size_t>(record_);
    if (!pending_.empty()) {
      const size_t take = std::min(ids.size(), record - pending_.size());
      pending_.insert(pending_.end(), ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(take));
      ids = ids.subspan(take);
      if (pending_.size() < record) return OkStatus();
      FB_RETURN_IF_ERROR(sink_->Append(pending_));
      pending_.clear();
    }
    const size_t full = ids.size() / record * record;
    if (full > 0) FB_RETURN_IF_ERROR(sink_->Append(ids.first(full)));
    pending_.assign(ids.begin() + static_cast<std::ptrdiff_t>(full), ids.end());
    return OkStatus();
  }

  void Report(bool force) {
    if (!progress_) return;
    const Clock::time_point now = Clock::now();
    if (!force && now - last_report_ < std::chrono::milliseconds(500)) return;
    last_report_ = now;
    live_.seconds = std::chrono::duration<double>(now - start_).count();
    progress_(live_);
  }

  const IngestOptions& options_;
  const int64_t record_;
  RecordSink* sink_;
  const std::function<void(const IngestProgress&)>& progress_;
  std::array<std::unique_ptr<Chunk>, kChunksInFlight + 1> chunks_;
  EncoderPool pool_;
  IngestResult result_;
  IngestProgress live_;
  const Clock::time_point start_ = Clock::now();
  Clock::time_point last_report_ = start_, last_commit_ = start_;
  std::vector<uint32_t> pending_;  // ids of the unfinished record
  std::vector<StoreSource> uncommitted_;
  uint64_t uncommitted_bytes_ = 0;
  std::unordered_set<std::string> added_;  // hashes of this run's sources
  // Sizes of the sources in the store: a file of another size cannot be one of them, so only
  // files of a known size are hashed before they are read (any other duplicate is still caught
  // by the hash taken while reading, and rolled back).
  std::unordered_set<uint64_t> sizes_;
};

}  // namespace

StatusOr<IngestResult> Ingest(const Tokenizer& tokenizer, const IngestOptions& options_in,
                              const std::function<void(const IngestProgress&)>& progress) {
  IngestOptions options = options_in;
  if (options.seq_len < 1) {
    return InvalidArgumentError("ingest: --seq-len " + std::to_string(options.seq_len) +
                                " must be >= 1");
  }
  if (options.out.empty()) return InvalidArgumentError("ingest: --out STORE is required");
  if (options.threads <= 0) {
    options.threads = std::max(1u, std::thread::hardware_concurrency());
  }
  if (options.chunk_bytes < 1) return InvalidArgumentError("ingest: chunk_bytes must be >= 1");
  FB_ASSIGN_OR_RETURN(std::vector<Input> inputs, ExpandInputs(options));

  const nlohmann::json description = {
      {"pid", static_cast<int64_t>(::getpid())},
      {"started_unix", std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count()},
      {"inputs", options.inputs}};
  RecordSink sink(
      options,
      {std::string(tokenizer.name()), tokenizer.hash(), Tokenizer::kVocabSize, options.seq_len},
      description.dump());
  FB_RETURN_IF_ERROR(sink.Start());
  IngestRun run(tokenizer, options, &sink, progress);
  for (const Input& input : inputs) {
    // A failing input is rolled back alone; the inputs before it are committed before the
    // error is returned (Note [Ingest commit]).
    if (Status added = run.Add(input); !added.ok()) {
      FB_RETURN_IF_ERROR(run.Commit());
      if (TokenStoreWriter* w = sink.open_writer()) w->Close().IgnoreError();
      return added;
    }
    FB_RETURN_IF_ERROR(run.CommitIfDue());
  }
  return run.Finish();
}

}  // namespace fullband::dataloader
