#include "dataloader/ingest.h"

#include <fcntl.h>
#include <simdjson.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_set>

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

  // Appends up to `max` bytes to *out; false at the end of the input.
  StatusOr<bool> Read(std::string* out, size_t max) {
    const size_t at = out->size();
    out->resize(at + max);
    ssize_t got;
    do {
      got = ::read(fd_, out->data() + at, max);
    } while (got < 0 && errno == EINTR);
    if (got < 0) {
      out->resize(at);
      return InternalError("input " + name_ + ": read failed: " + std::strerror(errno));
    }
    out->resize(at + static_cast<size_t>(got));
    XXH64_update(state_, out->data() + at, static_cast<size_t>(got));
    bytes_ += static_cast<uint64_t>(got);
    return got > 0;
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
  std::string block;
  for (;;) {
    block.clear();
    FB_ASSIGN_OR_RETURN(bool more, src.Read(&block, 4 << 20));
    if (!more) break;
  }
  return src.digest();
}

// Text to tokenize in one parallel round: pieces of documents, in order.
struct Chunk {
  struct Piece {
    size_t offset = 0, size = 0;
    bool ends_document = false;  // <|endoftext|> follows it
    int64_t json_line = 0;       // > 0: a JSONL line (this number) holding one document
  };
  std::string text;
  std::vector<Piece> pieces;
  int64_t documents = 0;

  // A JSONL line, parsed where it is tokenized (in parallel).
  void AddJsonLine(std::string_view line, int64_t number) {
    pieces.push_back(Piece{text.size(), line.size(), true, number});
    text.append(line);
    ++documents;
  }
  void Add(std::string_view piece, bool ends_document) {
    pieces.push_back(Piece{text.size(), piece.size(), ends_document});
    text.append(piece);
    documents += ends_document;
  }
  // Adds a document (or its last part), split into pieces that encode independently.
  void AddDocument(std::string_view doc, size_t target, bool ends_document) {
    const std::vector<std::string_view> parts = SplitForEncoding(doc, target);
    for (size_t i = 0; i < parts.size(); ++i) {
      Add(parts[i], ends_document && i + 1 == parts.size());
    }
    if (parts.empty() && ends_document) Add({}, true);
  }
};

struct Encoded {
  std::vector<uint32_t> tokens;
  int64_t replaced = 0;
};

// Tokenizes a chunk on `threads` threads, each taking a contiguous run of pieces of about equal
// bytes; the concatenation is the chunk's ids in order. JSONL lines are parsed here too, so
// that parsing runs in parallel as well; INVALID_ARGUMENT names `source`:line for a bad line.
StatusOr<Encoded> EncodeChunk(const Tokenizer& tok, const Chunk& chunk,
                              const IngestOptions& options, const std::string& source) {
  const int threads = options.threads;
  const size_t n = chunk.pieces.size();
  std::vector<size_t> bounds = {0};
  const size_t share = chunk.text.size() / static_cast<size_t>(threads) + 1;
  size_t bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    bytes += chunk.pieces[i].size;
    if (bytes >= share * bounds.size() && bounds.size() < static_cast<size_t>(threads)) {
      bounds.push_back(i + 1);
    }
  }
  if (bounds.back() != n) bounds.push_back(n);
  const size_t parts = bounds.size() - 1;
  std::vector<Encoded> out(parts);
  std::vector<Status> errors(parts);
  auto run = [&](size_t p) {
    Tokenizer::EncodeStats stats;
    simdjson::dom::parser parser;  // one per thread: parsers are not thread-safe
    std::vector<uint32_t>& ids = out[p].tokens;
    ids.reserve((bounds[p + 1] > bounds[p] ? chunk.text.size() / parts : 0) / 3);
    for (size_t i = bounds[p]; i < bounds[p + 1]; ++i) {
      const Chunk::Piece& piece = chunk.pieces[i];
      const std::string_view text = std::string_view(chunk.text).substr(piece.offset, piece.size);
      if (piece.json_line > 0) {
        auto fail = [&](const std::string& what) {
          errors[p] =
              InvalidArgumentError(source + ":" + std::to_string(piece.json_line) + ": " + what);
        };
        simdjson::dom::element doc;
        simdjson::dom::object object;
        std::string_view field;
        if (const auto err = parser.parse(text.data(), text.size()).get(doc)) {
          return fail(std::string("not a JSON value (") + simdjson::error_message(err) + ")");
        }
        if (doc.get_object().get(object)) return fail("not a JSON object");
        if (object[options.text_field].get_string().get(field)) {
          return fail("no string field \"" + options.text_field + "\"");
        }
        tok.Encode(field, options.allow_special, &ids, &stats);
      } else {
        tok.Encode(text, options.allow_special, &ids, &stats);
      }
      if (piece.ends_document) ids.push_back(Tokenizer::kEndOfText);
    }
    out[p].replaced = stats.replaced;
  };
  std::vector<std::thread> workers;
  for (size_t p = 1; p < parts; ++p) workers.emplace_back(run, p);
  if (parts > 0) run(0);
  for (auto& w : workers) w.join();
  for (const Status& e : errors) FB_RETURN_IF_ERROR(e);  // the first bad line in input order
  Encoded all;
  size_t total = 0;
  for (const Encoded& e : out) total += e.tokens.size();
  all.tokens.reserve(total);
  for (const Encoded& e : out) {
    all.tokens.insert(all.tokens.end(), e.tokens.begin(), e.tokens.end());
    all.replaced += e.replaced;
  }
  return all;
}

// Reads one input's documents and hands them on in chunks (`emit`), in order.
class DocumentReader {
 public:
  DocumentReader(const Input& input, const IngestOptions& options, ByteSource* src)
      : input_(input), options_(options), src_(src) {}

  Status Run(const std::function<Status(Chunk)>& emit) {
    const size_t block = 1 << 20;
    const size_t target = std::max<size_t>(
        64 << 10, static_cast<size_t>(options_.chunk_bytes) / static_cast<size_t>(threads() * 4));
    std::string carry;
    bool more = true;
    while (more) {
      FB_ASSIGN_OR_RETURN(more, src_->Read(&carry, block));
      size_t used = 0;
      if (input_.jsonl) {
        used = TakeLines(carry, !more);
      } else {
        // A whole text file is one document; cut it where encoding may restart.
        const size_t cut = more ? LastBreak(carry) : carry.size();
        if (cut > 0 || !more) {
          chunk_.AddDocument(std::string_view(carry).substr(0, cut), target, !more);
          if (!more && carry.empty() && src_->bytes() == 0) {
            chunk_ = Chunk();  // an empty file holds no document
          }
          used = cut;
        }
      }
      carry.erase(0, used);
      if (static_cast<int64_t>(chunk_.text.size()) >= options_.chunk_bytes || !more) {
        if (!chunk_.pieces.empty()) FB_RETURN_IF_ERROR(emit(std::move(chunk_)));
        chunk_ = Chunk();
      }
    }
    return OkStatus();
  }

 private:
  int threads() const { return std::max(1, options_.threads); }

  // The end of the last "\n" in `text` that is followed by an ASCII letter, or 0.
  static size_t LastBreak(std::string_view text) {
    for (size_t i = text.size(); i-- > 1;) {
      const unsigned char c = static_cast<unsigned char>(text[i]);
      if (text[i - 1] == '\n' && ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')) return i;
    }
    return 0;
  }

  // Takes the complete lines of `buf` as documents (parsed later, in parallel); returns the
  // bytes used.
  size_t TakeLines(std::string_view buf, bool at_end) {
    size_t at = 0;
    while (at < buf.size()) {
      size_t nl = buf.find('\n', at);
      if (nl == std::string_view::npos) {
        if (!at_end) break;
        nl = buf.size();
      }
      ++line_;
      std::string_view line = buf.substr(at, nl - at);
      at = std::min(nl + 1, buf.size());
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      chunk_.AddJsonLine(line, line_);
    }
    return at;
  }

  const Input& input_;
  const IngestOptions& options_;
  ByteSource* src_;
  Chunk chunk_;
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
  FB_ASSIGN_OR_RETURN(std::unique_ptr<TokenStoreWriter> writer,
                      TokenStoreWriter::Open(options.out, identity, description.dump()));

  IngestResult result;
  const int64_t record = options.seq_len + 1;
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
  std::vector<uint32_t> pending = writer->metadata().tail;  // ids of the unfinished record
  std::vector<StoreSource> uncommitted;
  std::unordered_set<std::string> added;  // hashes of this run's sources
  uint64_t uncommitted_bytes = 0;
  Clock::time_point last_commit = start;
  auto commit = [&]() -> Status {
    if (uncommitted.empty()) return OkStatus();
    FB_RETURN_IF_ERROR(writer->Commit(pending, uncommitted));
    uncommitted.clear();
    uncommitted_bytes = 0;
    last_commit = Clock::now();
    return OkStatus();
  };
  auto already_in = [&](const std::string& digest) {
    return writer->HasSource(digest) || added.count(digest) > 0;
  };

  // Sizes of the sources in the store: a file of another size cannot be one of them, so only
  // files of a known size are hashed before they are read (any other duplicate is still caught
  // by the hash taken while reading, and rolled back).
  std::unordered_set<uint64_t> sizes;
  for (const StoreSource& s : writer->metadata().sources) sizes.insert(s.bytes);
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
    const int64_t mark = writer->appended();
    const std::vector<uint32_t> pending_at_start = pending;
    std::deque<std::future<StatusOr<Encoded>>> inflight;
    auto pack = [&](StatusOr<Encoded> encoded) -> Status {
      FB_RETURN_IF_ERROR(encoded.status());
      Encoded& e = *encoded;
      stats.tokens += static_cast<int64_t>(e.tokens.size());
      stats.replaced += e.replaced;
      live.tokens += static_cast<int64_t>(e.tokens.size());
      pending.insert(pending.end(), e.tokens.begin(), e.tokens.end());
      const size_t full =
          pending.size() / static_cast<size_t>(record) * static_cast<size_t>(record);
      if (full > 0) {
        FB_RETURN_IF_ERROR(writer->Append(std::span<const uint32_t>(pending.data(), full)));
        pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(full));
      }
      return OkStatus();
    };
    auto undo = [&]() -> Status {  // forget this source
      pending = pending_at_start;
      live.documents -= stats.documents;
      live.tokens -= stats.tokens;
      return writer->RollbackTo(mark);
    };
    DocumentReader reader(input, options, &src);
    // Two chunks in flight: one being tokenized while the one before is packed and written and
    // the next is read.
    Status read = reader.Run([&](Chunk chunk) -> Status {
      stats.documents += chunk.documents;
      live.documents += chunk.documents;
      auto shared = std::make_shared<Chunk>(std::move(chunk));
      inflight.push_back(std::async(std::launch::async, [&tokenizer, shared, &options, &input] {
        return EncodeChunk(tokenizer, *shared, options, input.name);
      }));
      while (inflight.size() > 1) {
        StatusOr<Encoded> e = inflight.front().get();
        inflight.pop_front();
        FB_RETURN_IF_ERROR(pack(std::move(e)));
      }
      live.bytes = result.totals.bytes + src.bytes();
      report(false);
      return OkStatus();
    });
    while (!inflight.empty()) {  // also after an error: no task may outlive its inputs
      StatusOr<Encoded> e = inflight.front().get();
      inflight.pop_front();
      if (read.ok()) read = pack(std::move(e));
    }
    if (!read.ok()) {
      FB_RETURN_IF_ERROR(undo());
      FB_RETURN_IF_ERROR(commit());
      writer->Close().IgnoreError();
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
  FB_RETURN_IF_ERROR(writer->Close());
  result.totals.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  live = result.totals;
  report(true);
  result.sequences = writer->metadata().num_sequences;
  result.tail_tokens = static_cast<int64_t>(writer->metadata().tail.size());
  return result;
}

}  // namespace fullband::dataloader
