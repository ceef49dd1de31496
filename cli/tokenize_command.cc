// `fullband tokenize` (README.md, "Command line"): the Phi-4 ids of stdin or a file,
// space-separated or as JSON, and with --decode the bytes of ids. Exit 2 with one line on bad input
// (unreadable file, bad ranks file, an id that is not a number or not in the vocabulary).
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/flags.h"
#include "dataloader/tokenizer.h"

namespace fullband::cli {
namespace {

constexpr char kTokenizeUsage[] =
    "usage: fullband tokenize [--input FILE] [--allow-special] [--json] [--tokenizer RANKS]\n"
    "       fullband tokenize --decode [--input FILE] [--tokenizer RANKS]\n"
    "  Prints the Phi-4 token ids of FILE (default: stdin), space-separated, or\n"
    "  {\"ids\": [...], \"replaced\": N} with --json (N: ill-formed UTF-8 sequences replaced by\n"
    "  U+FFFD). Special-token text such as <|endoftext|> is ordinary text unless\n"
    "  --allow-special. --decode reads ids (separated by spaces, commas or newlines) and writes\n"
    "  their bytes. RANKS defaults to $FULLBAND_TOKENIZER_RANKS or the file that\n"
    "  scripts/fetch_deps.sh fetched.\n";

StatusOr<std::string> ReadInput(const std::string& path) {
  std::ostringstream buffer;
  if (path.empty() || path == "-") {
    buffer << std::cin.rdbuf();
    if (std::cin.bad()) return InvalidArgumentError("cannot read stdin");
    return std::move(buffer).str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(path + ": cannot open");
  buffer << in.rdbuf();
  if (in.bad()) return InvalidArgumentError(path + ": read error");
  return std::move(buffer).str();
}

// Ids separated by white space or commas; INVALID_ARGUMENT naming the first that is not one.
StatusOr<std::vector<uint32_t>> ParseIds(const std::string& text) {
  std::vector<uint32_t> ids;
  size_t i = 0;
  while (true) {
    while (i < text.size() &&
           (text[i] == ',' || std::isspace(static_cast<unsigned char>(text[i])))) {
      ++i;
    }
    if (i >= text.size()) break;
    const size_t start = i;
    uint64_t v = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9' && v <= UINT32_MAX) {
      v = v * 10 + (text[i++] - '0');
    }
    const bool separated =
        i >= text.size() || text[i] == ',' || std::isspace(static_cast<unsigned char>(text[i]));
    if (i == start || !separated || v > UINT32_MAX) {
      size_t end = start;
      while (end < text.size() && end < start + 20 && text[end] != ',' &&
             !std::isspace(static_cast<unsigned char>(text[end]))) {
        ++end;
      }
      return InvalidArgumentError("--decode: token " + std::to_string(ids.size()) + " ('" +
                                  text.substr(start, end - start) + "') is not an id");
    }
    ids.push_back(static_cast<uint32_t>(v));
  }
  return ids;
}

Status Tokenize(const Flags& flags) {
  if (!flags.positional().empty()) {
    return InvalidArgumentError("unexpected argument '" + flags.positional()[0] +
                                "' (the input is --input FILE or stdin)");
  }
  FB_ASSIGN_OR_RETURN(dataloader::Tokenizer tokenizer,
                      dataloader::Tokenizer::Load(
                          flags.Get("tokenizer", dataloader::Tokenizer::DefaultRanksPath())));
  FB_ASSIGN_OR_RETURN(std::string input, ReadInput(flags.Get("input", "")));
  if (flags.Has("decode")) {
    FB_ASSIGN_OR_RETURN(std::vector<uint32_t> ids, ParseIds(input));
    FB_ASSIGN_OR_RETURN(std::string text, tokenizer.Decode(ids));
    std::fwrite(text.data(), 1, text.size(), stdout);
    return OkStatus();
  }
  std::vector<uint32_t> ids;
  dataloader::Tokenizer::EncodeStats stats;
  tokenizer.Encode(input, flags.Has("allow-special"), &ids, &stats);
  std::string out = flags.Has("json") ? "{\"ids\": [" : "";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += flags.Has("json") ? ", " : " ";
    out += std::to_string(ids[i]);
  }
  if (flags.Has("json")) out += "], \"replaced\": " + std::to_string(stats.replaced) + "}";
  out += '\n';
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (!flags.Has("json") && stats.replaced > 0) {
    std::fprintf(stderr, "fullband tokenize: replaced %ld ill-formed UTF-8 sequences by U+FFFD\n",
                 static_cast<long>(stats.replaced));
  }
  return OkStatus();
}

}  // namespace

int RunTokenize(const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      std::printf("%s", kTokenizeUsage);
      return 0;
    }
  }
  StatusOr<Flags> flags =
      Flags::Parse(args, {"input", "tokenizer"}, {"allow-special", "json", "decode"});
  Status status = flags.ok() ? Tokenize(*flags) : flags.status();
  if (!status.ok()) {
    std::fprintf(stderr, "fullband tokenize: %s\n", status.message().c_str());
    return status.code() == StatusCode::kInvalidArgument ||
                   status.code() == StatusCode::kNotFound || status.code() == StatusCode::kDataLoss
               ? 2
               : 1;
  }
  return 0;
}

}  // namespace fullband::cli
