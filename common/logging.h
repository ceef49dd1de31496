// Minimal leveled logging to stderr: FB_LOG(INFO) << "step " << step;
// One line per statement, prefixed with level, UTC time (ms) and file:line:
//   I 2026-12-07T08:40:01.123Z trainer.cc:449] resuming at step 40 from ...
// Thread-safe: each statement is formatted into a buffer and written with one call.
// Messages below the process's threshold (INFO unless SetLogThreshold says otherwise) are dropped;
// the fullband binary sets it from --log-level or FULLBAND_LOG_LEVEL.
#pragma once

#include <sstream>

#include "common/check.h"  // internal::Voidify

namespace fullband {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Every level, and its name ("DEBUG", "INFO", "WARNING", "ERROR").
inline constexpr LogLevel kLogLevels[] = {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning,
                                          LogLevel::kError};
const char* LogLevelName(LogLevel level);

// Messages at `level` and above are printed from now on, by every thread.
void SetLogThreshold(LogLevel level);

// True when messages at `level` are printed.
bool LogEnabled(LogLevel level);

namespace internal {

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

}  // namespace internal
}  // namespace fullband

#define FB_LOG_LEVEL_DEBUG ::fullband::LogLevel::kDebug
#define FB_LOG_LEVEL_INFO ::fullband::LogLevel::kInfo
#define FB_LOG_LEVEL_WARNING ::fullband::LogLevel::kWarning
#define FB_LOG_LEVEL_ERROR ::fullband::LogLevel::kError

#define FB_LOG(level)                           \
  !::fullband::LogEnabled(FB_LOG_LEVEL_##level) \
      ? (void)0                                 \
      : ::fullband::internal::Voidify() &       \
            ::fullband::internal::LogMessage(FB_LOG_LEVEL_##level, __FILE__, __LINE__).stream()
