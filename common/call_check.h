// One checker for the return codes of foreign libraries (CUDA runtime, cuBLAS, NCCL).
//
// Each library adapter specializes, in its own header,
//   template <> struct fullband::CallTraits<CodeType> {
//     static bool Succeeded(CodeType code);
//     static std::string ErrorString(CodeType code);
//   };
// (ops/cuda/cuda_call.h). Then
//   FB_CALL(cudaMemcpy(...))         returns a Status: INTERNAL naming the call, file:line and
//                                    the library's error string;
//   FB_CALL_CHECK(cublasSgemm(...))  aborts the same way (for calls that only fail on a
//                                    programmer error).
// MPI's return codes are plain ints, which a specialization cannot tell apart from any other
// int: comm/mpi_communicator.cc turns them into a Status itself (MpiError).
#pragma once

#include <string>

#include "common/check.h"
#include "common/status.h"

namespace fullband {

template <typename Code>
struct CallTraits;  // specialized per library; see above

namespace internal {

template <typename Code>
Status CallStatus(Code code, const char* expr, const char* file, int line) {
  if (CallTraits<Code>::Succeeded(code)) return OkStatus();
  return InternalError(std::string(expr) + " failed at " + file + ":" + std::to_string(line) +
                       ": " + CallTraits<Code>::ErrorString(code));
}

}  // namespace internal
}  // namespace fullband

#define FB_CALL(expr) ::fullband::internal::CallStatus((expr), #expr, __FILE__, __LINE__)

#define FB_CALL_CHECK(expr)                                                             \
  do {                                                                                  \
    auto fb_code_ = (expr);                                                             \
    using FbCodeType_ = decltype(fb_code_);                                             \
    FB_CHECK(::fullband::CallTraits<FbCodeType_>::Succeeded(fb_code_))                  \
        << #expr << ": " << ::fullband::CallTraits<FbCodeType_>::ErrorString(fb_code_); \
  } while (0)
