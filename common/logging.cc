#include "common/logging.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "common/check.h"

namespace fullband {
namespace {

LogLevel ThresholdFromEnv() {
  const char* env = std::getenv("FULLBAND_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  if (std::strcmp(env, "DEBUG") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "WARNING") == 0) return LogLevel::kWarning;
  if (std::strcmp(env, "ERROR") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

}  // namespace

bool LogEnabled(LogLevel level) {
  static const LogLevel threshold = ThresholdFromEnv();
  return static_cast<int>(level) >= static_cast<int>(threshold);
}

namespace internal {

// The prefix's time is UTC wall-clock time to the millisecond, so that the logs of the
// coordinator and of every rank on every machine line up.
LogMessage::LogMessage(LogLevel level, const char* file, int line) {
  static const char kLetters[] = {'D', 'I', 'W', 'E'};
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc;
  gmtime_r(&seconds, &utc);
  char time[32];
  std::strftime(time, sizeof(time), "%Y-%m-%dT%H:%M:%S", &utc);
  const char* base = std::strrchr(file, '/');
  char prefix[128];
  std::snprintf(prefix, sizeof(prefix), "%c %s.%03dZ %s:%d] ", kLetters[static_cast<int>(level)],
                time, static_cast<int>(millis), base ? base + 1 : file, line);
  stream_ << prefix;
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string text = stream_.str();
  std::fwrite(text.data(), 1, text.size(), stderr);
}

}  // namespace internal
}  // namespace fullband
