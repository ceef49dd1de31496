// Test doubles of the coordinator's seams: a clock the test moves by hand and a launcher that
// records what it was asked and lets the test decide what Poll reports; and the small job
// config the coordinator tests share.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/config.h"
#include "coordinator/clock.h"
#include "coordinator/launcher.h"
#include "tests/common/test_configs.h"

namespace fullband::coordinator {

class FakeClock final : public Clock {
 public:
  explicit FakeClock(double now = 1'700'000'000) : now_(now) {}
  double NowSeconds() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  void Advance(double seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += seconds;
  }

 private:
  mutable std::mutex mu_;
  double now_;
};

class FakeLauncher final : public Launcher {
 public:
  std::string_view name() const override { return "fake"; }

  StatusOr<std::string> Launch(const LaunchSpec& spec) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fail_next_launch_.ok()) {
      Status s = fail_next_launch_;
      fail_next_launch_ = OkStatus();
      return s;
    }
    launches_.push_back(spec);
    const std::string handle = "h" + std::to_string(launches_.size());
    states_[handle] = LaunchState{};
    return handle;
  }
  StatusOr<LaunchState> Poll(const std::string& handle) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = states_.find(handle);
    if (it == states_.end()) return NotFoundError("no attempt " + handle);
    return it->second;
  }
  Status Kill(const std::string& handle) override {
    std::lock_guard<std::mutex> lock(mu_);
    killed_.push_back(handle);
    auto it = states_.find(handle);
    if (it != states_.end() && it->second.phase == LaunchState::Phase::kRunning) {
      it->second.phase = LaunchState::Phase::kKilled;
    }
    return OkStatus();
  }

  // Test controls.
  void FailNextLaunch(Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_next_launch_ = std::move(s);
  }
  void SetExited(const std::string& handle, int code) {
    std::lock_guard<std::mutex> lock(mu_);
    states_[handle] = LaunchState{LaunchState::Phase::kExited, code, ""};
  }
  void SetPending(const std::string& handle, const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    states_[handle] = LaunchState{LaunchState::Phase::kPending, 0, why};
  }
  void SetRunning(const std::string& handle) {
    std::lock_guard<std::mutex> lock(mu_);
    states_[handle] = LaunchState{};
  }
  std::vector<LaunchSpec> launches() const {
    std::lock_guard<std::mutex> lock(mu_);
    return launches_;
  }
  std::vector<std::string> killed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return killed_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<LaunchSpec> launches_;
  std::vector<std::string> killed_;
  std::map<std::string, LaunchState> states_;
  Status fail_next_launch_;
};

}  // namespace fullband::coordinator
