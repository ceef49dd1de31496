// `fullband tokenize` (README.md, "Command line"): the Phi-4 ids of stdin or a file,
// space-separated or as JSON, and with --decode the bytes of ids. Exit 2 with one line on bad input
// (unreadable file, bad ranks file, an id that is not a number or not in the vocabulary).
#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/json_line.h"
#include "cli/options.h"
#include "dataloader/tokenizer.h"

namespace fullband::cli {
namespace {

struct TokenizeArgs {
  std::string input;  // "" or "-": stdin
  std::string tokenizer;
  bool allow_special = false, json = false, decode = false;
};

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

Status Tokenize(const TokenizeArgs& args) {
  FB_ASSIGN_OR_RETURN(dataloader::Tokenizer tokenizer, dataloader::Tokenizer::Load(args.tokenizer));
  FB_ASSIGN_OR_RETURN(std::string input, ReadInput(args.input));
  if (args.decode) {
    FB_ASSIGN_OR_RETURN(std::vector<uint32_t> ids, ParseIds(input));
    FB_ASSIGN_OR_RETURN(std::string text, tokenizer.Decode(ids));
    std::fwrite(text.data(), 1, text.size(), stdout);
    return OkStatus();
  }
  std::vector<uint32_t> ids;
  dataloader::Tokenizer::EncodeStats stats;
  tokenizer.Encode(input, args.allow_special, &ids, &stats);
  if (args.json) {
    PrintJsonLine(OrderedJson{{"ids", ids}, {"replaced", stats.replaced}});
  } else {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i > 0) out += ' ';
      out += std::to_string(ids[i]);
    }
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  if (!args.json && stats.replaced > 0) {
    std::fprintf(stderr, "fullband tokenize: replaced %ld ill-formed UTF-8 sequences by U+FFFD\n",
                 static_cast<long>(stats.replaced));
  }
  return OkStatus();
}

}  // namespace

Command AddTokenize(CLI::App& fullband) {
  CLI::App* app = fullband.add_subcommand(
      "tokenize", "print the Phi-4 token ids of stdin or a file (--json, --decode)");
  app->footer(
      "Prints the Phi-4 token ids of FILE (default: stdin), space-separated, or\n"
      "{\"ids\": [...], \"replaced\": N} with --json (N: ill-formed UTF-8 sequences replaced by\n"
      "U+FFFD). --decode reads ids (separated by spaces, commas or newlines) and writes their\n"
      "bytes (docs/DATA.md).");
  auto args = std::make_shared<TokenizeArgs>();
  app->add_option("--input", args->input, "the text, or the ids with --decode (default: stdin)")
      ->type_name("FILE");
  app->add_flag("--allow-special", args->allow_special,
                "special-token text such as <|endoftext|> becomes its id (else ordinary text)");
  app->add_flag("--json", args->json, "print {\"ids\": [...], \"replaced\": N}");
  app->add_flag("--decode", args->decode, "read ids and write their bytes");
  AddTokenizerOption(*app, &args->tokenizer);
  return {app, [args] {
            const Status status = Tokenize(*args);
            if (status.ok()) return 0;
            std::fprintf(stderr, "fullband tokenize: %s\n", status.message().c_str());
            const StatusCode c = status.code();
            return c == StatusCode::kInvalidArgument || c == StatusCode::kNotFound ||
                           c == StatusCode::kDataLoss
                       ? 2
                       : 1;
          }};
}

}  // namespace fullband::cli
