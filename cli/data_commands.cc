// `fullband ingest` (text / JSONL / directories / stdin → a RocksDB token store) and
// `fullband data info|verify STORE` (dataloader/FORMAT.md).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/json_line.h"
#include "cli/options.h"
#include "dataloader/ingest.h"
#include "dataloader/token_store.h"
#include "dataloader/tokenizer.h"

namespace fullband::cli {
namespace {

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

struct IngestArgs {
  dataloader::IngestOptions options;
  std::string tokenizer;
  bool json = false;
};

int Ingest(const IngestArgs& args) {
  const dataloader::IngestOptions& o = args.options;
  const bool json = args.json;
  StatusOr<dataloader::Tokenizer> tok = dataloader::Tokenizer::Load(args.tokenizer);
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
    PrintJsonLine(j);
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

// `data info` (verify = false) or `data verify`.
int Data(const std::string& path, bool verify, bool json) {
  auto store = dataloader::RocksDbTokenStore::Open(path);
  if (!store.ok()) return Fail("data", store.status());
  const dataloader::StoreMetadata& m = (*store)->metadata();
  if (!verify) {
    if (json) {
      nlohmann::json j = nlohmann::json::parse(m.ToJson(/*with_sources=*/true));
      j["disk_bytes"] = (*store)->disk_bytes();
      j["unfinished_ingest"] = (*store)->unfinished_ingest();
      j["tail"] = m.tail.size();  // the count, not the ids
      PrintJsonLine(j);
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
    PrintJsonLine(j);
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

}  // namespace

Command AddIngest(CLI::App& fullband) {
  CLI::App* app = fullband.add_subcommand(
      "ingest",
      "tokenize text / JSONL / directories into a token store (--input, --out, --seq-len)");
  app->footer(
      "Tokenizes text files, JSONL files (one {\"text\": ...} object per line), directories\n"
      "(recursively) and stdin (-) with the Phi-4 tokenizer, appends <|endoftext|> to every\n"
      "document, and packs the ids into records of N + 1 tokens in the token store STORE\n"
      "(created if missing). Inputs already in the store are skipped; the tokens after the\n"
      "last full record wait in the store for the next ingest (docs/DATA.md).");
  auto args = std::make_shared<IngestArgs>();
  dataloader::IngestOptions& o = args->options;
  app->add_option("--input", o.inputs, "a file, a directory or - (stdin); repeat for more")
      ->type_name("PATH")
      ->required()
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app->add_option("--out", o.out, "the token store")->type_name("STORE")->required();
  app->add_option("--seq-len", o.seq_len, "tokens per record, less one")
      ->type_name("N")
      ->transform(IntIn(1))
      ->required();
  using dataloader::InputFormat;
  OneOf(app->add_option("--format", o.format, "how to read the inputs (auto: by file name)"),
        {{"auto", static_cast<int64_t>(InputFormat::kAuto)},
         {"text", static_cast<int64_t>(InputFormat::kText)},
         {"jsonl", static_cast<int64_t>(InputFormat::kJsonl)}})
      ->default_str("auto");
  app->add_option("--text-field", o.text_field, "the JSONL field holding a document's text")
      ->type_name("F")
      ->capture_default_str();
  app->add_option("--threads", o.threads, "tokenizer threads (0: every core)")
      ->type_name("N")
      ->transform(IntIn(0, 1024))
      ->capture_default_str();
  app->add_flag("--allow-special", o.allow_special,
                "special-token text such as <|endoftext|> becomes its id");
  AddTokenizerOption(*app, &args->tokenizer);
  app->add_flag("--json", args->json, "print the summary as one JSON object");
  return {app, [args] { return Ingest(*args); }};
}

Command AddData(CLI::App& fullband) {
  CLI::App* app = fullband.add_subcommand(
      "data", "inspect or check a token store: `fullband data info|verify STORE`");
  app->require_subcommand(1);
  struct Args {
    std::string store;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* info =
      app->add_subcommand("info", "counts, tokenizer, seq_len, sources and size of a token store");
  CLI::App* verify = app->add_subcommand(
      "verify",
      "read every record and check its length, checksum and ids against the metadata; "
      "exit 1 when anything is wrong, naming the records");
  for (CLI::App* verb : {info, verify}) {
    verb->add_option("STORE", args->store, "a token store (dataloader/FORMAT.md)")->required();
    verb->add_flag("--json", args->json, "print one JSON object");
  }
  return {app, [verify, args] { return Data(args->store, verify->parsed(), args->json); }};
}

}  // namespace fullband::cli
