// Runs node on tiktoken_ids.mjs through files in a temporary directory.
#include "tests/dataloader/tiktoken_reference.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tests/common/temp_dir.h"

namespace fullband::dataloader::testing {

using fullband::testing::MakeTempDir;

namespace {

std::string ScriptPath() {
  return std::string(FULLBAND_SOURCE_DIR) + "/tests/dataloader/tiktoken_ids.mjs";
}

Status RunNode(const std::string& args) {
  const std::string node = FULLBAND_NODE;
  if (node.empty() || node.find("NOTFOUND") != std::string::npos) {
    return FailedPreconditionError("node was not found when configuring (scripts/setup.sh)");
  }
  const std::string command = "'" + node + "' '" + ScriptPath() + "' " + args;
  const int rc = std::system(command.c_str());
  if (rc != 0) {
    return InternalError("`" + command + "` exited with status " + std::to_string(rc) +
                         " (are the npm packages fetched? scripts/fetch_deps.sh)");
  }
  return OkStatus();
}

void PutU32(std::string* out, uint32_t v) { out->append(reinterpret_cast<const char*>(&v), 4); }

}  // namespace

const Tokenizer& DefaultTokenizer() {
  static const Tokenizer* const tokenizer = [] {
    StatusOr<Tokenizer> t = Tokenizer::Load(Tokenizer::DefaultRanksPath());
    FB_CHECK(t.ok()) << t.status().ToString();
    return new Tokenizer(std::move(t).value());
  }();
  return *tokenizer;
}

StatusOr<std::string> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(path + ": cannot open");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return std::move(buffer).str();
}

StatusOr<std::vector<ReferenceIds>> TiktokenIds(const std::vector<ReferenceCase>& cases) {
  const std::string dir = MakeTempDir();
  std::string request;
  for (const auto& c : cases) {
    request.push_back(c.allow_special ? 1 : 0);
    PutU32(&request, static_cast<uint32_t>(c.bytes.size()));
    request += c.bytes;
  }
  {
    std::ofstream out(dir + "/in.bin", std::ios::binary);
    out.write(request.data(), static_cast<std::streamsize>(request.size()));
    if (!out) return InternalError(dir + "/in.bin: write failed");
  }
  FB_RETURN_IF_ERROR(RunNode("cases '" + dir + "/in.bin' '" + dir + "/out.bin'"));
  FB_ASSIGN_OR_RETURN(std::string response, ReadFileBytes(dir + "/out.bin"));
  std::vector<ReferenceIds> result;
  size_t off = 0;
  auto get = [&](uint32_t* v) {
    if (off + 4 > response.size()) return false;
    std::memcpy(v, response.data() + off, 4);
    off += 4;
    return true;
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    uint32_t replaced, count;
    if (!get(&replaced) || !get(&count) || off + 4ull * count > response.size()) {
      return DataLossError(dir + "/out.bin: truncated at case " + std::to_string(i));
    }
    ReferenceIds r;
    r.replaced = replaced;
    r.ids.resize(count);
    if (count > 0) std::memcpy(r.ids.data(), response.data() + off, 4ull * count);
    off += 4ull * count;
    result.push_back(std::move(r));
  }
  std::remove((dir + "/in.bin").c_str());
  std::remove((dir + "/out.bin").c_str());
  rmdir(dir.c_str());
  return result;
}

StatusOr<std::vector<std::string>> TiktokenTokenBytes() {
  const std::string dir = MakeTempDir();
  FB_RETURN_IF_ERROR(RunNode("decode '" + dir + "/tokens.bin'"));
  FB_ASSIGN_OR_RETURN(std::string all, ReadFileBytes(dir + "/tokens.bin"));
  std::remove((dir + "/tokens.bin").c_str());
  rmdir(dir.c_str());
  std::vector<std::string> tokens;
  for (size_t off = 0; off < all.size();) {
    uint32_t n;
    if (off + 4 > all.size()) return DataLossError("tokens.bin: truncated");
    std::memcpy(&n, all.data() + off, 4);
    if (off + 4 + n > all.size()) return DataLossError("tokens.bin: truncated");
    tokens.push_back(all.substr(off + 4, n));
    off += 4 + n;
  }
  return tokens;
}

Status WriteTiktokenCorpus(const std::string& dir) { return RunNode("corpus '" + dir + "'"); }

}  // namespace fullband::dataloader::testing
