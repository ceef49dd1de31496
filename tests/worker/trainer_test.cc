// The token file, then the whole single-process trainer on real
// text (the GPL and friends in /usr/share/common-licenses, bytes as token ids): the loss of
// every pass count must fall.
#include "worker/trainer.h"

#include <dirent.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>

#include "comm/in_process_communicator.h"
#include "dataloader/token_store.h"
#include "tests/common/temp_dir.h"
#include "worker/token_file.h"

namespace fullband::worker {
namespace {

std::string WriteTokens(const std::vector<uint32_t>& ids, const std::string& name) {
  const std::string path = fullband::testing::ProcessTempDir() + "/" + name;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(ids.data()), ids.size() * 4);
  return path;
}

TEST(TokenFile, BadFiles_AreRefusedWithTheReason) {
  EXPECT_EQ(TokenFile::Open("/nonexistent/tokens.bin", 10, 4).status().code(),
            StatusCode::kNotFound);
  const std::string odd = fullband::testing::ProcessTempDir() + "/odd.bin";
  std::ofstream(odd, std::ios::binary) << "abcdefg";
  EXPECT_EQ(TokenFile::Open(odd, 10, 1).status().code(), StatusCode::kDataLoss);
  const Status big = TokenFile::Open(WriteTokens({1, 2, 30, 4, 5}, "big.bin"), 10, 2).status();
  EXPECT_EQ(big.code(), StatusCode::kDataLoss);
  EXPECT_NE(big.message().find("token 2 is 30, outside the vocabulary [0, 10)"), std::string::npos);
  EXPECT_EQ(TokenFile::Open(WriteTokens({1, 2, 3}, "short.bin"), 10, 4).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(TokenFile, Epoch_VisitsEverySequenceOnce_AndTheSeedFixesTheOrder) {
  std::vector<uint32_t> ids(4 * 25 + 1);
  std::iota(ids.begin(), ids.end(), 0);
  auto file = TokenFile::Open(WriteTokens(ids, "seq.bin"), 1000, 4).value();
  ASSERT_EQ(file.num_sequences(), 25);
  std::vector<int32_t> batch(25 * 5);
  file.ReadBatch(9, 0, 25, batch.data());
  std::set<int32_t> starts;
  for (int i = 0; i < 25; ++i) {
    starts.insert(batch[i * 5]);
    for (int t = 0; t < 5; ++t) ASSERT_EQ(batch[i * 5 + t], batch[i * 5] + t);  // contiguous
  }
  EXPECT_EQ(starts.size(), 25u);
  std::vector<int32_t> again(25 * 5);
  file.ReadBatch(9, 0, 25, again.data());
  EXPECT_EQ(batch, again);
  // Resuming at a cursor reads what the uninterrupted stream read there.
  std::vector<int32_t> tail(5 * 5);
  file.ReadBatch(9, 20, 5, tail.data());
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), batch.begin() + 20 * 5));
}

// Real prose: the license texts every Debian system ships, bytes as token ids.
// `name`: the file under the test temp dir; tests that CTest may run at once use different ones.
std::string LicenseTokens(const std::string& name) {
  std::vector<uint32_t> ids;
  DIR* dir = opendir("/usr/share/common-licenses");
  if (dir == nullptr) return "";
  std::vector<std::string> names;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') names.push_back(e->d_name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    std::ifstream in("/usr/share/common-licenses/" + n, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (unsigned char c : text) ids.push_back(c);
    ids.push_back(256);  // EOD
  }
  return ids.size() > 100000 ? WriteTokens(ids, name) : "";
}

// `fullband train` alone: one rank.
StatusOr<TrainSummary> Train(const Config& c, const std::function<void(const StepRecord&)>& f) {
  std::vector<std::unique_ptr<comm::Communicator>> one =
      comm::InProcessCommunicator::CreateGroup(1);
  return TrainLocal(c, one[0].get(), f);
}

Config SmallConfig() {
  Config c;
  ModelConfig& m = c.model;
  m.vocab_size = 257;
  m.eod_id = 256;
  m.d_model = 64;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.head_dim = 16;
  m.ffn_dim = 192;
  m.max_seq_len = 128;
  m.window = 32;
  m.full_attention_every = 2;
  c.data.batch_size = 8;
  c.data.seq_len = 64;
  c.optim.lr = 3e-3;
  c.optim.warmup_steps = 20;
  c.schedule.steps = 200;
  c.schedule.phases = {{1.0, {{1, 0.6}, {2, 0.3}, {3, 0.1}}}};
  c.runtime.peak_gflops = 100;  // MFU is not under test; skip the measurement
  return c;
}

TEST(Trainer, RealText_LossOfEveryPassCountFalls) {
  const std::string path = LicenseTokens("licenses.bin");
  if (path.empty()) GTEST_SKIP() << "/usr/share/common-licenses not found";
  Config c = SmallConfig();
  c.data.path = path;
  std::map<int64_t, std::vector<std::vector<double>>> losses;
  StatusOr<TrainSummary> s =
      Train(c, [&](const StepRecord& r) { losses[r.passes].push_back(r.pass_loss); });
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_GT(s->token_equivalents, s->tokens);
  for (int64_t k = 1; k <= 3; ++k) {
    const auto& l = losses[k];
    ASSERT_GE(l.size(), 10u) << "too few " << k << "-pass steps";
    for (int64_t pass = 0; pass < k; ++pass) {
      double first = 0, last = 0;
      const size_t w = std::min<size_t>(5, l.size() / 3);
      for (size_t i = 0; i < w; ++i) {
        first += l[i][pass] / w;
        last += l[l.size() - 1 - i][pass] / w;
      }
      // From ln 257 ≈ 5.5 at init, byte-level English falls below 4 within 200 steps.
      EXPECT_LT(last, first - 1.0)
          << k << "-pass steps, pass " << pass + 1 << ": " << first << " -> " << last;
    }
  }
}

// The license bytes packed into a token store of records of 65 tokens, as ingest would.
std::string LicenseStore(const std::string& name) {
  const std::string file = LicenseTokens("licenses-for-store.bin");
  if (file.empty()) return "";
  std::ifstream in(file, std::ios::binary);
  std::vector<uint32_t> ids;
  uint32_t id;
  while (in.read(reinterpret_cast<char*>(&id), 4)) ids.push_back(id);
  const std::string path = fullband::testing::ProcessTempDir() + "/" + name;
  std::filesystem::remove_all(path);
  auto w = dataloader::TokenStoreWriter::Open(path, {"bytes", "-", 257, 64}, "{}");
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  const size_t full = ids.size() / 65 * 65;
  EXPECT_TRUE((*w)->Append({ids.data(), full}).ok());
  dataloader::StoreSource src{"licenses", ids.size(), "0", 1, static_cast<int64_t>(ids.size()), 0};
  EXPECT_TRUE((*w)->Commit({ids.begin() + full, ids.end()}, {src}).ok());
  EXPECT_TRUE((*w)->Close().ok());
  return path;
}

TEST(Trainer, TokenStore_TrainsAndTheLossFalls) {
  const std::string store = LicenseStore("licenses.store");
  if (store.empty()) GTEST_SKIP() << "/usr/share/common-licenses not found";
  Config c = SmallConfig();
  c.data.sources = {{store, 1.0}};
  c.schedule.steps = 80;
  c.schedule.phases = {{1.0, {{1, 0.5}, {2, 0.5}}}};
  std::vector<double> first_pass;
  StatusOr<TrainSummary> s =
      Train(c, [&](const StepRecord& r) { first_pass.push_back(r.pass_loss[0]); });
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(first_pass.size(), 80u);
  const double first = (first_pass[0] + first_pass[1] + first_pass[2]) / 3;
  const double last = (first_pass[77] + first_pass[78] + first_pass[79]) / 3;
  EXPECT_LT(last, first - 1.0) << first << " -> " << last;
}

TEST(Trainer, MissingStoreOrNoData_IsAClearError) {
  Config c = SmallConfig();
  const Status none = Train(c, nullptr).status();
  EXPECT_EQ(none.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.message().find("data.path"), std::string::npos);
  c.data.sources = {{"/nonexistent/store", 1.0}};
  const Status missing = Train(c, nullptr).status();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("/nonexistent/store"), std::string::npos);
}

}  // namespace
}  // namespace fullband::worker
