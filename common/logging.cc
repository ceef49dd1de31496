#include "common/logging.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

const std::chrono::steady_clock::time_point kStart = std::chrono::steady_clock::now();

}  // namespace

bool LogEnabled(LogLevel level) {
  static const LogLevel threshold = ThresholdFromEnv();
  return static_cast<int>(level) >= static_cast<int>(threshold);
}

namespace internal {

LogMessage::LogMessage(LogLevel level, const char* file, int line) {
  static const char kLetters[] = {'D', 'I', 'W', 'E'};
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - kStart).count();
  const char* base = std::strrchr(file, '/');
  char prefix[96];
  std::snprintf(prefix, sizeof(prefix), "%c %9.3f %s:%d] ", kLetters[static_cast<int>(level)],
                seconds, base ? base + 1 : file, line);
  stream_ << prefix;
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string text = stream_.str();
  std::fwrite(text.data(), 1, text.size(), stderr);
}

}  // namespace internal
}  // namespace fullband
