// The Config's one field list (common/config_fields.h) against the structs it lists and against
// the defaults the docs show.
#include "common/config_fields.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <set>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

#include "tests/common/doc_blocks.h"

namespace fullband {
namespace {

// The number of members of an aggregate: the most initializers `T{...}` accepts (one object
// that converts to anything stands for each).
struct AnyMember {
  template <typename T>
  operator T() const;  // only in unevaluated operands
};

template <typename T, typename... Members>
constexpr size_t MemberCount(Members... members) {
  if constexpr (requires { T{members..., AnyMember{}}; }) {
    return MemberCount<T>(members..., AnyMember{});
  } else {
    return sizeof...(Members);
  }
}

template <typename T>
size_t VisitedCount() {
  T value{};
  size_t n = 0;
  VisitFields(value, [&](const char*, auto&) { ++n; });
  return n;
}

template <typename T>
void ExpectEveryMemberListed() {
  EXPECT_EQ(VisitedCount<T>(), MemberCount<T>()) << typeid(T).name();
}

template <typename... Structs>
void ExpectEveryMemberListedOfEach() {
  (ExpectEveryMemberListed<Structs>(), ...);
}

TEST(ConfigFields, EveryMemberOfEveryStructIsListed) {
  ExpectEveryMemberListedOfEach<ModelConfig, ParallelConfig, DataSource, DataConfig, OptimConfig,
                                SchedulePhase, ScheduleConfig, CheckpointConfig, BudgetConfig,
                                SlurmConfig, LauncherConfig, RuntimeConfig, Config>();
}

// The YAML blocks of the docs that show defaults: each follows a line holding kMarker.
constexpr char kMarker[] = "<!-- config defaults: tests/common/config_fields_test.cc -->";

// Scalars compare as numbers where both are numbers (1.0e-5 is 1.0000000000000001e-05).
bool SameValue(const YAML::Node& doc, const YAML::Node& code) {
  if (doc.Type() != code.Type()) return false;
  if (doc.IsScalar()) {
    std::istringstream a(doc.Scalar()), b(code.Scalar());
    double x, y;
    if ((a >> x) && a.eof() && (b >> y) && b.eof()) return x == y;
    return doc.Scalar() == code.Scalar();
  }
  if (doc.size() != code.size()) return false;
  if (doc.IsSequence()) {
    for (size_t i = 0; i < doc.size(); ++i) {
      if (!SameValue(doc[i], code[i])) return false;
    }
    return true;
  }
  for (const auto& kv : doc) {
    if (!code[kv.first.Scalar()] || !SameValue(kv.second, code[kv.first.Scalar()])) return false;
  }
  return true;
}

TEST(ConfigFields, DocsShowEveryFieldWithItsDefault) {
  const YAML::Node defaults = YAML::Load(ConfigToYaml(Config{}));
  std::set<std::string> shown;
  for (const char* doc : {"docs/MODEL.md", "docs/TRAINING.md", "docs/COORDINATOR.md"}) {
    const std::string path = std::string(FULLBAND_SOURCE_DIR) + "/" + doc;
    const std::vector<std::string> blocks = testing::MarkedYamlBlocks(path, kMarker);
    EXPECT_FALSE(blocks.empty()) << doc << " has no block marked " << kMarker;
    for (const std::string& block : blocks) {
      for (const auto& section : YAML::Load(block)) {
        const std::string name = section.first.Scalar();
        ASSERT_TRUE(defaults[name]) << doc << ": no section " << name;
        for (const auto& field : section.second) {
          const std::string where = name + "." + field.first.Scalar();
          const YAML::Node code = defaults[name][field.first.Scalar()];
          ASSERT_TRUE(code) << doc << ": no field " << where;
          EXPECT_TRUE(SameValue(field.second, code))
              << doc << ": " << where << " shows " << YAML::Dump(field.second)
              << ", the default is " << YAML::Dump(code);
          shown.insert(where);
        }
      }
    }
  }
  const Config config;
  VisitFields(config, [&](const char* section, const auto& part) {
    VisitFields(part, [&](const char* field, const auto&) {
      const std::string where = std::string(section) + "." + field;
      EXPECT_TRUE(shown.count(where)) << where << " is in no marked block of the docs";
    });
  });
}

}  // namespace
}  // namespace fullband
