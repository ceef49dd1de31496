#include "common/logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

#include "common/check.h"

namespace fullband {
namespace {

std::atomic<int> threshold{static_cast<int>(LogLevel::kInfo)};

}  // namespace

const char* LogLevelName(LogLevel level) {
  static const char* const kNames[] = {"DEBUG", "INFO", "WARNING", "ERROR"};
  return kNames[static_cast<int>(level)];
}

void SetLogThreshold(LogLevel level) {
  threshold.store(static_cast<int>(level), std::memory_order_relaxed);
}

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) >= threshold.load(std::memory_order_relaxed);
}

namespace internal {

// The prefix's time is UTC wall-clock time to the millisecond, so that the logs of the
// coordinator and of every rank on every machine line up.
LogMessage::LogMessage(LogLevel level, const char* file, int line) {
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
  std::snprintf(prefix, sizeof(prefix), "%c %s.%03dZ %s:%d] ", LogLevelName(level)[0], time,
                static_cast<int>(millis), base ? base + 1 : file, line);
  stream_ << prefix;
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string text = stream_.str();
  std::fwrite(text.data(), 1, text.size(), stderr);
}

}  // namespace internal
}  // namespace fullband
