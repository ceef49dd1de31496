#include "common/logging.h"

#include <gtest/gtest.h>

#include <string>

namespace fullband {
namespace {

TEST(LoggingTest, Threshold_DropsTheLevelsBelowIt) {
  EXPECT_FALSE(LogEnabled(LogLevel::kDebug));  // the default is INFO
  EXPECT_TRUE(LogEnabled(LogLevel::kInfo));
  SetLogThreshold(LogLevel::kWarning);
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo));
  EXPECT_TRUE(LogEnabled(LogLevel::kWarning));
  EXPECT_TRUE(LogEnabled(LogLevel::kError));
  SetLogThreshold(LogLevel::kDebug);
  EXPECT_TRUE(LogEnabled(LogLevel::kDebug));
  SetLogThreshold(LogLevel::kInfo);
}

TEST(LoggingTest, LevelNames) {
  std::string names;
  for (LogLevel level : kLogLevels) names += std::string(LogLevelName(level)) + " ";
  EXPECT_EQ(names, "DEBUG INFO WARNING ERROR ");
}

}  // namespace
}  // namespace fullband
