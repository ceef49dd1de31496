// Clock: where the coordinator reads the time, so that tests drive deadlines and back-off with
// a fake clock instead of sleeping. Implementations are thread-safe.
#pragma once

#include <chrono>

namespace fullband::coordinator {

class Clock {
 public:
  virtual ~Clock() = default;
  // Seconds since the Unix epoch (wall time: it is stored and shown to users).
  virtual double NowSeconds() const = 0;
};

class RealClock final : public Clock {
 public:
  double NowSeconds() const override {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace fullband::coordinator
