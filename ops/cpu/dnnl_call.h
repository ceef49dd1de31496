// CallTraits for oneDNN status codes, so FB_CALL / FB_CALL_CHECK (common/call_check.h) check them.
#pragma once

#include <oneapi/dnnl/dnnl.h>

#include <string>

#include "common/call_check.h"

namespace fullband {

template <>
struct CallTraits<dnnl_status_t> {
  static bool Succeeded(dnnl_status_t code) { return code == dnnl_success; }
  static std::string ErrorString(dnnl_status_t code) {
    return "oneDNN status " + std::to_string(static_cast<int>(code));
  }
};

}  // namespace fullband
