// `fullband ingest` (text / JSONL / directories / stdin → a RocksDB token store) and
// `fullband data info|verify STORE` (dataloader/FORMAT.md).
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/flags.h"
#include "dataloader/ingest.h"
#include "dataloader/token_store.h"
#include "dataloader/tokenizer.h"

namespace fullband::cli {
namespace {

constexpr char kIngestUsage[] =
    "usage: fullband ingest --input PATH [--input PATH ...] --out STORE --seq-len N\n"
    "                       [--format auto|text|jsonl] [--text-field text] [--threads N]\n"
    "                       [--allow-special] [--tokenizer RANKS] [--json]\n"
    "  Tokenizes text files, JSONL files (one {\"text\": ...} object per line), directories\n"
    "  (recursively) and stdin (-) with the Phi-4 tokenizer, appends <|endoftext|> to every\n"
    "  document, and packs the ids into records of N + 1 tokens in the token store STORE\n"
    "  (created if missing). Inputs already in the store are skipped; the tokens after the\n"
    "  last full record wait in the store for the next ingest.\n";

constexpr char kDataUsage[] =
    "usage: fullband data info STORE [--json]\n"
    "       fullband data verify STORE [--json]\n"
    "  info: counts, tokenizer, seq_len and size of a token store.\n"
    "  verify: reads every record and checks its length, checksum and ids against the\n"
    "  metadata; exits 1 when anything is wrong, naming the records.\n";

std::string Human(double v) {
  char buf[32];
  if (v >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.2fG", v / 1e9);
  } else if (v >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  } else if (v >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  }
  return buf;
}

int Fail(const char* command, const Status& s) {
  std::fprintf(stderr, "fullband %s: %s\n", command, s.ToString().c_str());
  const StatusCode c = s.code();
  return c == StatusCode::kInvalidArgument || c == StatusCode::kNotFound ? 2 : 1;
}

}  // namespace

int RunIngest(const std::vector<std::string>& args) {
  // --input may repeat: gather its values first, then parse the rest.
  std::vector<std::string> inputs, rest;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--input" && i + 1 < args.size()) {
      inputs.push_back(args[++i]);
    } else {
      rest.push_back(args[i]);
    }
  }
  StatusOr<Flags> flags =
      Flags::Parse(rest, {"out", "seq-len", "format", "text-field", "threads", "tokenizer"},
                   {"allow-special", "json", "help"});
  if (!flags.ok() || flags->Has("help") || !flags->positional().empty()) {
    return Usage(kIngestUsage, flags, "ingest");
  }
  dataloader::IngestOptions o;
  o.inputs = inputs;
  if (o.inputs.empty()) return Fail("ingest", InvalidArgumentError("--input PATH is required"));
  StatusOr<std::string> out = flags->Required("out");
  if (!out.ok()) return Fail("ingest", out.status());
  o.out = *out;
  StatusOr<int64_t> seq_len = flags->GetInt("seq-len", 0);
  if (!seq_len.ok() || *seq_len < 1) {
    return Fail("ingest", InvalidArgumentError("--seq-len N (a positive integer) is required"));
  }
  o.seq_len = *seq_len;
  const std::string format = flags->Get("format", "auto");
  if (format == "auto") {
    o.format = dataloader::InputFormat::kAuto;
  } else if (format == "text") {
    o.format = dataloader::InputFormat::kText;
  } else if (format == "jsonl") {
    o.format = dataloader::InputFormat::kJsonl;
  } else {
    return Fail("ingest",
                InvalidArgumentError("--format " + format + ": expected auto, text or jsonl"));
  }
  o.text_field = flags->Get("text-field", "text");
  StatusOr<int64_t> threads = flags->GetInt("threads", 0);
  if (!threads.ok() || *threads < 0 || *threads > 1024) {
    return Fail("ingest", InvalidArgumentError("--threads must be an integer in [0, 1024]"));
  }
  o.threads = static_cast<int>(*threads);
  o.allow_special = flags->Has("allow-special");
  const bool json = flags->Has("json");

  StatusOr<dataloader::Tokenizer> tok = dataloader::Tokenizer::Load(
      flags->Get("tokenizer", dataloader::Tokenizer::DefaultRanksPath()));
  if (!tok.ok()) return Fail("ingest", tok.status());

  const bool terminal = isatty(STDERR_FILENO);
  auto progress = [&](const dataloader::IngestProgress& p) {
    if (!terminal) return;
    const double s = p.seconds > 0 ? p.seconds : 1e-9;
    std::fprintf(stderr, "\ringest: %s bytes  %s docs  %s tokens  %.1f MB/s  %s tokens/s   ",
                 Human(static_cast<double>(p.bytes)).c_str(),
                 Human(static_cast<double>(p.documents)).c_str(),
                 Human(static_cast<double>(p.tokens)).c_str(), p.bytes / s / 1e6,
                 Human(p.tokens / s).c_str());
    std::fflush(stderr);
  };
  StatusOr<dataloader::IngestResult> r = dataloader::Ingest(*tok, o, progress);
  if (terminal) std::fputc('\n', stderr);
  if (!r.ok()) return Fail("ingest", r.status());
  const dataloader::IngestProgress& t = r->totals;
  const double mbps = t.seconds > 0 ? t.bytes / t.seconds / 1e6 : 0;
  if (json) {
    nlohmann::json j = {{"store", o.out},
                        {"sources_added", r->sources_added},
                        {"sources_skipped", r->sources_skipped},
                        {"skipped", r->skipped},
                        {"bytes", t.bytes},
                        {"documents", t.documents},
                        {"tokens", t.tokens},
                        {"replaced", r->replaced},
                        {"sequences", r->sequences},
                        {"tail_tokens", r->tail_tokens},
                        {"seconds", t.seconds},
                        {"mb_per_s", mbps}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "ingest: %ld source(s) added, %ld already in the store; %ld documents, %ld tokens from "
        "%s bytes in %.2f s (%.1f MB/s); %ld invalid UTF-8 sequence(s) replaced\n"
        "store %s: %ld records of %ld tokens, %ld tokens waiting in the tail\n",
        r->sources_added, r->sources_skipped, t.documents, t.tokens,
        Human(static_cast<double>(t.bytes)).c_str(), t.seconds, mbps, r->replaced, o.out.c_str(),
        r->sequences, o.seq_len + 1, r->tail_tokens);
  }
  return 0;
}

int RunData(const std::vector<std::string>& args) {
  StatusOr<Flags> flags = Flags::Parse(args, {}, {"json", "help"});
  if (!flags.ok() || flags->Has("help") || flags->positional().size() != 2) {
    return Usage(kDataUsage, flags, "data");
  }
  const std::string& verb = flags->positional()[0];
  const std::string& path = flags->positional()[1];
  if (verb != "info" && verb != "verify") {
    std::fprintf(stderr, "fullband data: unknown action '%s' (info or verify)\n", verb.c_str());
    return 2;
  }
  const bool json = flags->Has("json");
  auto store = dataloader::RocksDbTokenStore::Open(path);
  if (!store.ok()) return Fail("data", store.status());
  const dataloader::StoreMetadata& m = (*store)->metadata();
  if (verb == "info") {
    if (json) {
      nlohmann::json j = nlohmann::json::parse(m.ToJson(/*with_sources=*/true));
      j["disk_bytes"] = (*store)->disk_bytes();
      j["unfinished_ingest"] = (*store)->unfinished_ingest();
      j["tail"] = m.tail.size();  // the count, not the ids
      std::printf("%s\n", j.dump().c_str());
      return 0;
    }
    std::printf("store      %s\n", path.c_str());
    std::printf("tokenizer  %s (ranks sha256 %s), vocabulary %ld\n", m.tokenizer.c_str(),
                m.tokenizer_hash.c_str(), m.vocab_size);
    std::printf("records    %ld of %ld tokens (seq_len %ld)\n", m.num_sequences, m.seq_len + 1,
                m.seq_len);
    std::printf("tokens     %ld (%zu waiting in the tail)\n", m.num_tokens, m.tail.size());
    std::printf("documents  %ld in %zu source(s)\n", m.num_documents, m.sources.size());
    std::printf("disk       %s bytes\n",
                Human(static_cast<double>((*store)->disk_bytes())).c_str());
    for (const dataloader::StoreSource& s : m.sources) {
      std::printf("  source %s: %lu bytes, %ld documents, %ld tokens, %ld replaced, xxh64 %s\n",
                  s.name.c_str(), static_cast<unsigned long>(s.bytes), s.documents, s.tokens,
                  s.replaced, s.xxh64.c_str());
    }
    if (!(*store)->unfinished_ingest().empty()) {
      std::printf(
          "warning: an ingest started and did not finish (%s); the store reads as of its last "
          "commit\n",
          (*store)->unfinished_ingest().c_str());
    }
    return 0;
  }
  const bool terminal = isatty(STDERR_FILENO) && !json;
  auto report = (*store)->Verify([&](int64_t done, int64_t total) {
    if (terminal) std::fprintf(stderr, "\rverify: %ld / %ld records", done, total);
  });
  if (terminal) std::fputc('\n', stderr);
  if (!report.ok()) return Fail("data", report.status());
  const bool good = report->bad_records == 0;
  if (json) {
    nlohmann::json j = {{"store", path},
                        {"ok", good},
                        {"records", report->records},
                        {"bad_records", report->bad_records},
                        {"extra_records", report->extra_records},
                        {"problems", report->problems},
                        {"unfinished_ingest", (*store)->unfinished_ingest()}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    for (const std::string& p : report->problems) std::printf("bad: %s\n", p.c_str());
    if (report->bad_records > static_cast<int64_t>(report->problems.size())) {
      std::printf("... and %ld more\n",
                  report->bad_records - static_cast<int64_t>(report->problems.size()));
    }
    std::printf("%s: %ld records read, %ld bad, %ld left past the end by an unfinished ingest%s\n",
                good ? "ok" : "FAILED", report->records, report->bad_records, report->extra_records,
                good ? "" : " — do not train on this store");
  }
  return good ? 0 : 1;
}

}  // namespace fullband::cli
