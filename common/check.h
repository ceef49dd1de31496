// FB_CHECK: aborts with file:line and a message on a broken invariant (a programmer error:
// shape mismatch, out-of-range index computed by our own code). Never used for bad input,
// which gets a Status (status.h). Streams extra context: FB_CHECK(a == b) << "a=" << a;
#pragma once

#include <sstream>

namespace fullband::internal {

// Collects the streamed message and aborts in its destructor.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `FB_CHECK(x) << ...` be a single expression of type void.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace fullband::internal

#define FB_CHECK(condition)                       \
  (condition) ? (void)0                           \
              : ::fullband::internal::Voidify() & \
                    ::fullband::internal::CheckFailure(__FILE__, __LINE__, #condition).stream()

#define FB_CHECK_EQ(a, b) FB_CHECK((a) == (b)) << #a "=" << (a) << " " #b "=" << (b) << " "
#define FB_CHECK_LE(a, b) FB_CHECK((a) <= (b)) << #a "=" << (a) << " " #b "=" << (b) << " "
#define FB_CHECK_LT(a, b) FB_CHECK((a) < (b)) << #a "=" << (a) << " " #b "=" << (b) << " "
#define FB_CHECK_GE(a, b) FB_CHECK((a) >= (b)) << #a "=" << (a) << " " #b "=" << (b) << " "
#define FB_CHECK_GT(a, b) FB_CHECK((a) > (b)) << #a "=" << (a) << " " #b "=" << (b) << " "
