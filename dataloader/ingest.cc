#include "dataloader/ingest.h"

#include <fcntl.h>
#include <simdjson.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
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
// Note [Ingest memory]: a page's first touch is costly on some virtual machines (3 to 14 us
// per 4 KB page where the host shadows the guest's page tables; docs/PERF.md, "Page faults"),
// and a short ingest touches all of its buffers for the first time: five chunks of text and
// of ids, about 10 MB, were 2,500 faults (25 ms of a 0.3 s, 25 MB ingest). So a chunk's text
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

  nlohmann::json description = {
      {"pid", static_cast<int64_t>(::getpid())},
      {"started_unix", std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count()},
      {"inputs", options.inputs}};
  const TokenStoreWriter::Identity identity{std::string(tokenizer.name()), tokenizer.hash(),
                                            Tokenizer::kVocabSize, options.seq_len};
  // Note [Opening a new store]: creating a store takes 10-20 ms of synced writes. A store that
  // does not exist yet has no sources to skip and no tail to continue, so it is created on
  // another thread while the first chunks are read, encoded and packed; records packed before
  // it is open wait in memory (a few MB: opening takes tens of ms while both cores encode).
  // (A store another process makes in between is found when it opens, and the ingest stops
  // with an error rather than pack onto a tail it did not start from.)
  std::unique_ptr<TokenStoreWriter> writer;
  const std::string how = description.dump();
  auto open_store = [&] { return TokenStoreWriter::Open(options.out, identity, how); };
  std::future<StatusOr<std::unique_ptr<TokenStoreWriter>>> opening;
  if (fs::exists(fs::path(options.out) / "CURRENT")) {
    FB_ASSIGN_OR_RETURN(writer, open_store());
  } else {
    opening = std::async(std::launch::async, open_store);
  }

  IngestResult result;
  const int64_t record = options.seq_len + 1;
  // Full records packed before the store opened (in huge pages: Note [Ingest memory]).
  std::vector<uint32_t, HugePageAllocator<uint32_t>> staged;
  if (!writer) staged.reserve(kHugePageBytes / sizeof(uint32_t));
  auto get_writer = [&]() -> StatusOr<TokenStoreWriter*> {
    if (writer) return writer.get();
    FB_ASSIGN_OR_RETURN(writer, opening.get());
    const StoreMetadata& m = writer->metadata();
    if (m.num_sequences > 0 || !m.tail.empty() || !m.sources.empty()) {
      return UnavailableError("ingest: store " + options.out +
                              " was created by another process while this ingest started; "
                              "run it again");
    }
    FB_RETURN_IF_ERROR(writer->Append(staged));
    staged = decltype(staged)();
    return writer.get();
  };
  auto append = [&](std::span<const uint32_t> records) -> Status {
    if (!writer && opening.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      staged.insert(staged.end(), records.begin(), records.end());
      return OkStatus();
    }
    FB_ASSIGN_OR_RETURN(TokenStoreWriter * w, get_writer());
    return w->Append(records);
  };
  // Records appended (or staged) since the last commit, and dropping those past a mark.
  auto appended = [&] {
    return writer ? writer->appended() : static_cast<int64_t>(staged.size()) / record;
  };
  auto rollback_to = [&](int64_t mark) -> Status {
    if (writer) return writer->RollbackTo(mark);
    staged.resize(static_cast<size_t>(mark * record));
    return OkStatus();
  };
  const Clock::time_point start = Clock::now();
  Clock::time_point last_report = start;
  IngestProgress live;
  auto report = [&](bool force) {
    if (!progress) return;
    const Clock::time_point now = Clock::now();
    if (!force && now - last_report < std::chrono::milliseconds(500)) return;
    last_report = now;
    live.seconds = std::chrono::duration<double>(now - start).count();
    progress(live);
  };

  // Sources are committed in groups (Note [Ingest commit]): every kCommitBytes of input or
  // kCommitSeconds, and at the end. A failing source is rolled back alone; the sources before
  // it are committed before the error is returned.
  constexpr uint64_t kCommitBytes = 64 << 20;
  constexpr double kCommitSeconds = 10;
  // Ids of the unfinished record.
  std::vector<uint32_t> pending = writer ? writer->metadata().tail : std::vector<uint32_t>();
  std::vector<StoreSource> uncommitted;
  std::unordered_set<std::string> added;  // hashes of this run's sources
  uint64_t uncommitted_bytes = 0;
  Clock::time_point last_commit = start;
  auto commit = [&]() -> Status {
    if (uncommitted.empty()) return OkStatus();
    FB_ASSIGN_OR_RETURN(TokenStoreWriter * w, get_writer());
    FB_RETURN_IF_ERROR(w->Commit(pending, uncommitted));
    uncommitted.clear();
    uncommitted_bytes = 0;
    last_commit = Clock::now();
    return OkStatus();
  };
  auto already_in = [&](const std::string& digest) {
    return (writer && writer->HasSource(digest)) || added.count(digest) > 0;
  };

  // Sizes of the sources in the store: a file of another size cannot be one of them, so only
  // files of a known size are hashed before they are read (any other duplicate is still caught
  // by the hash taken while reading, and rolled back).
  std::unordered_set<uint64_t> sizes;
  if (writer) {
    for (const StoreSource& s : writer->metadata().sources) sizes.insert(s.bytes);
  }
  // Note [Ingest pipeline].
  std::vector<std::unique_ptr<Chunk>> chunks(kChunksInFlight + 1);
  for (auto& c : chunks) c = std::make_unique<Chunk>();
  EncoderPool pool(tokenizer, options);
  for (const Input& input : inputs) {
    std::error_code ec;
    const uint64_t size = input.is_stdin ? 0 : fs::file_size(input.name, ec);
    if (!input.is_stdin && (ec || sizes.count(size))) {
      FB_ASSIGN_OR_RETURN(std::string digest, HashFile(input));
      if (already_in(digest)) {
        ++result.sources_skipped;
        result.skipped.push_back(input.name);
        continue;
      }
    }
    FB_ASSIGN_OR_RETURN(ByteSource src, ByteSource::Open(input));
    StoreSource stats;
    stats.name = input.name;
    const int64_t mark = appended();
    const std::vector<uint32_t> pending_at_start = pending;
    // Records straight from the encoded ids; `pending` holds the unfinished one.
    auto pack = [&](std::span<const uint32_t> ids) -> Status {
      stats.tokens += static_cast<int64_t>(ids.size());
      live.tokens += static_cast<int64_t>(ids.size());
      if (!pending.empty()) {
        const size_t take = std::min(ids.size(), static_cast<size_t>(record) - pending.size());
        pending.insert(pending.end(), ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(take));
        ids = ids.subspan(take);
        if (pending.size() < static_cast<size_t>(record)) return OkStatus();
        FB_RETURN_IF_ERROR(append(pending));
        pending.clear();
      }
      const size_t full = ids.size() / static_cast<size_t>(record) * static_cast<size_t>(record);
      if (full > 0) FB_RETURN_IF_ERROR(append(ids.first(full)));
      pending.assign(ids.begin() + static_cast<std::ptrdiff_t>(full), ids.end());
      return OkStatus();
    };
    auto finish = [&](Chunk* chunk) -> Status {  // the oldest chunk in flight
      pool.Wait(chunk);
      for (size_t b = 0; b < chunk->num_batches; ++b) {
        const Chunk::Batch& batch = chunk->batches[b];
        FB_RETURN_IF_ERROR(batch.error);
        stats.replaced += batch.replaced;
        FB_RETURN_IF_ERROR(pack(batch.ids));
      }
      return OkStatus();
    };
    auto undo = [&]() -> Status {  // forget this source
      pending = pending_at_start;
      live.documents -= stats.documents;
      live.tokens -= stats.tokens;
      return rollback_to(mark);
    };
    std::deque<Chunk*> inflight;
    size_t next_free = 0;
    DocumentReader reader(input, options, &src);
    Status read = reader.Run(
        [&] {
          Chunk* c = chunks[next_free++ % chunks.size()].get();
          c->Reset();
          c->source = &input.name;
          return c;
        },
        [&](Chunk* chunk) -> Status {
          stats.documents += chunk->documents;
          live.documents += chunk->documents;
          pool.Submit(chunk);
          inflight.push_back(chunk);
          // Keep one chunk free for the reader to fill while the others are encoded.
          while (inflight.size() + 1 >= chunks.size()) {
            Chunk* oldest = inflight.front();
            inflight.pop_front();
            FB_RETURN_IF_ERROR(finish(oldest));
          }
          live.bytes = result.totals.bytes + src.bytes();
          report(false);
          return OkStatus();
        });
    while (!inflight.empty()) {  // also after an error: no batch may outlive its chunk's use
      Chunk* oldest = inflight.front();
      inflight.pop_front();
      if (read.ok()) {
        read = finish(oldest);
      } else {
        pool.Wait(oldest);
      }
    }
    if (!read.ok()) {
      FB_RETURN_IF_ERROR(undo());
      FB_RETURN_IF_ERROR(commit());
      if (writer) writer->Close().IgnoreError();
      return read;
    }
    stats.bytes = src.bytes();
    stats.xxh64 = src.digest();
    if (already_in(stats.xxh64)) {  // stdin whose bytes were ingested before
      FB_RETURN_IF_ERROR(undo());
      ++result.sources_skipped;
      result.skipped.push_back(input.name);
      continue;
    }
    uncommitted.push_back(stats);
    added.insert(stats.xxh64);
    sizes.insert(stats.bytes);
    uncommitted_bytes += stats.bytes;
    ++result.sources_added;
    result.totals.bytes += stats.bytes;
    result.totals.documents += stats.documents;
    result.totals.tokens += stats.tokens;
    result.replaced += stats.replaced;
    if (uncommitted_bytes >= kCommitBytes ||
        std::chrono::duration<double>(Clock::now() - last_commit).count() >= kCommitSeconds) {
      FB_RETURN_IF_ERROR(commit());
    }
  }
  FB_RETURN_IF_ERROR(commit());
  FB_RETURN_IF_ERROR(get_writer().status());  // an empty input still makes the store
  FB_RETURN_IF_ERROR(writer->Close());
  result.totals.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  live = result.totals;
  report(true);
  result.sequences = writer->metadata().num_sequences;
  result.tail_tokens = static_cast<int64_t>(writer->metadata().tail.size());
  return result;
}

}  // namespace fullband::dataloader
