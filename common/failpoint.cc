#include "common/failpoint.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace fullband::failpoint {
namespace {

struct Armed {
  std::mutex mu;
  bool armed = false;
  std::string name;
  int64_t step = 0;
};

Armed& State() {
  static Armed* a = new Armed;  // never destroyed: Hit may run while the process exits
  return *a;
}

}  // namespace

Status Arm(const std::string& spec) {
  const size_t at = spec.rfind('@');
  char* end = nullptr;
  const long long step =
      at == std::string::npos ? 0 : std::strtoll(spec.c_str() + at + 1, &end, 10);
  if (at == std::string::npos || at == 0 || end == spec.c_str() + at + 1 || *end != '\0') {
    return InvalidArgumentError("failpoint '" + spec + "': expected NAME@STEP");
  }
  Armed& a = State();
  std::lock_guard<std::mutex> lock(a.mu);
  a.name = spec.substr(0, at);
  a.step = step;
  a.armed = true;
  return OkStatus();
}

void Hit(std::string_view name, int64_t step) {
  Armed& a = State();
  std::lock_guard<std::mutex> lock(a.mu);
  if (!a.armed || a.name != name || a.step != step) return;
  std::fprintf(stderr, "failpoint %s@%lld: killing this process\n", a.name.c_str(),
               static_cast<long long>(step));
  std::fflush(stderr);
  std::raise(SIGKILL);
}

}  // namespace fullband::failpoint
