// Safetensors: round trip, metadata, and every corruption reported as DATA_LOSS naming the file.
#include "checkpoint/safetensors.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "tests/common/temp_dir.h"

namespace fullband::checkpoint {
namespace {

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fullband::testing::MakeTempDir("fullband_st_"); }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  // Writes raw bytes: an 8-byte header length, the header text, then `data`.
  std::string WriteRaw(const std::string& header, const std::string& data,
                       int64_t header_len = -1) {
    const std::string path = dir_ + "/raw.safetensors";
    std::ofstream out(path, std::ios::binary);
    const uint64_t n = header_len >= 0 ? header_len : header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
    out << header << data;
    return path;
  }

  std::string dir_;
};

TEST_F(SafetensorsTest, RoundTrip_KeepsNamesDtypesShapesBytesAndMetadata) {
  const std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -1e-30f};
  const std::vector<int32_t> ids = {1, 2, 3, 100257};
  const float scalar = 0.75f;
  const std::string path = dir_ + "/a.safetensors";
  ASSERT_TRUE(WriteSafetensors(path,
                               {{"embed.weight", StDType::kF32, {2, 3}, w.data()},
                                {"tokens", StDType::kI32, {1, 4}, ids.data()},
                                {"loss.total", StDType::kF32, {}, &scalar}},
                               {{"format", "pt"}})
                  .ok());
  StatusOr<SafetensorsFile> f = SafetensorsFile::Read(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->metadata().at("format"), "pt");
  StatusOr<const SafetensorsFile::Entry*> e = f->Find("embed.weight", StDType::kF32, {2, 3});
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(std::memcmp(f->data(**e), w.data(), w.size() * 4), 0);
  StatusOr<const SafetensorsFile::Entry*> t = f->Find("tokens", StDType::kI32, {1, 4});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(std::memcmp(f->data(**t), ids.data(), ids.size() * 4), 0);
  StatusOr<const SafetensorsFile::Entry*> s = f->Find("loss.total", StDType::kF32, {});
  ASSERT_TRUE(s.ok());
  float back;
  std::memcpy(&back, f->data(**s), 4);
  EXPECT_EQ(back, 0.75f);
}

TEST_F(SafetensorsTest, Find_WrongDtypeOrShapeOrName_Fails) {
  const std::vector<float> w(6, 1.0f);
  const std::string path = dir_ + "/b.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {{"w", StDType::kF32, {2, 3}, w.data()}}).ok());
  StatusOr<SafetensorsFile> f = SafetensorsFile::Read(path);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->Find("missing", StDType::kF32).status().code(), StatusCode::kNotFound);
  const Status dtype = f->Find("w", StDType::kI32).status();
  EXPECT_NE(dtype.message().find("tensor w is F32, expected I32"), std::string::npos);
  const Status shape = f->Find("w", StDType::kF32, {3, 2}).status();
  EXPECT_NE(shape.message().find("has shape [2, 3], expected [3, 2]"), std::string::npos);
}

TEST_F(SafetensorsTest, RoundTrip_EveryDtypeKeepsItsBytes) {
  const std::vector<double> f64 = {1.0 / 3, -2.5e300};
  const std::vector<int64_t> i64 = {-1, int64_t{1} << 62};
  const std::vector<uint8_t> u8 = {0, 255, 7};
  const std::vector<uint16_t> half = {0x3c00, 0xc000};  // BF16 / F16 bit patterns
  const std::string path = dir_ + "/dtypes.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {{"f64", StDType::kF64, {2}, f64.data()},
                                      {"i64", StDType::kI64, {2, 1}, i64.data()},
                                      {"u8", StDType::kU8, {3}, u8.data()},
                                      {"bf16", StDType::kBF16, {2}, half.data()},
                                      {"f16", StDType::kF16, {1, 2}, half.data()}})
                  .ok());
  StatusOr<SafetensorsFile> f = SafetensorsFile::Read(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const auto bytes_of = [&](const char* name, StDType t, std::vector<int64_t> shape) {
    const SafetensorsFile::Entry* e = f->Find(name, t, shape).value();
    return std::string(reinterpret_cast<const char*>(f->data(*e)), e->bytes);
  };
  const auto raw = [](const auto& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(v[0]));
  };
  EXPECT_EQ(bytes_of("f64", StDType::kF64, {2}), raw(f64));
  EXPECT_EQ(bytes_of("i64", StDType::kI64, {2, 1}), raw(i64));
  EXPECT_EQ(bytes_of("u8", StDType::kU8, {3}), raw(u8));
  EXPECT_EQ(bytes_of("bf16", StDType::kBF16, {2}), raw(half));
  EXPECT_EQ(bytes_of("f16", StDType::kF16, {1, 2}), raw(half));
}

TEST_F(SafetensorsTest, WriteFailures_AreInternalNamingThePath) {
  const std::vector<float> w(2, 1.0f);
  Status s =
      WriteSafetensors(dir_ + "/no/such/dir/a.safetensors", {{"w", StDType::kF32, {2}, w.data()}});
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find(dir_ + "/no/such/dir/a.safetensors"), std::string::npos)
      << s.message();
  s = WriteSafetensors(dir_ + "/dup.safetensors",
                       {{"w", StDType::kF32, {2}, w.data()}, {"w", StDType::kF32, {2}, w.data()}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("duplicate"), std::string::npos);
  if (::geteuid() != 0) {  // root writes into read-only directories
    ASSERT_EQ(::chmod(dir_.c_str(), 0500), 0);
    EXPECT_EQ(
        WriteSafetensors(dir_ + "/ro.safetensors", {{"w", StDType::kF32, {2}, w.data()}}).code(),
        StatusCode::kInternal);
    ::chmod(dir_.c_str(), 0700);
  }
}

TEST_F(SafetensorsTest, MissingFile_IsNotFound) {
  EXPECT_EQ(SafetensorsFile::Read(dir_ + "/none").status().code(), StatusCode::kNotFound);
}

struct Corrupt {
  const char* header;
  int data_bytes;
  int64_t header_len;  // -1: the true length
  const char* expected;
};

class SafetensorsCorruption : public SafetensorsTest,
                              public ::testing::WithParamInterface<Corrupt> {};

TEST_P(SafetensorsCorruption, IsDataLossNamingTheProblem) {
  const Corrupt& c = GetParam();
  const std::string path = WriteRaw(c.header, std::string(c.data_bytes, '\0'), c.header_len);
  StatusOr<SafetensorsFile> f = SafetensorsFile::Read(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(f.status().message().find(path), std::string::npos);
  EXPECT_NE(f.status().message().find(c.expected), std::string::npos) << f.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    All, SafetensorsCorruption,
    ::testing::Values(Corrupt{"{}", 0, 1 << 20, "exceeds the file"},
                      Corrupt{"{not json", 0, -1, "not a JSON object"},
                      Corrupt{"[1, 2]", 0, -1, "not a JSON object"},
                      Corrupt{R"({"w": {"dtype": "Q8", "shape": [1], "data_offsets": [0, 1]}})", 1,
                              -1, "unknown dtype"},
                      Corrupt{R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8,
                              -1, "does not fill 8 bytes"},
                      Corrupt{R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
                              12, -1, "outside the 12 data bytes"},
                      Corrupt{R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})",
                              4, -1, "bad dimension"},
                      Corrupt{R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                    "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}})",
                              6, -1, "overlap"},
                      Corrupt{R"({"w": {"dtype": "F32", "shape": [1]}})", 4, -1,
                              "needs dtype, shape"}));

TEST(SafetensorsShortFile, TooShortForAHeader_IsDataLoss) {
  const std::string path = "/tmp/fullband_st_short";
  std::ofstream(path, std::ios::binary) << "abc";
  EXPECT_EQ(SafetensorsFile::Read(path).status().code(), StatusCode::kDataLoss);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace fullband::checkpoint
