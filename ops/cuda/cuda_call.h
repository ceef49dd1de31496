// CallTraits specializations (common/call_check.h) for the CUDA runtime (cudaError_t), cuBLAS
// (cublasStatus_t) and, when nccl.h is on the include path, NCCL (ncclResult_t), so that
// FB_CALL(...) returns an INTERNAL Status and FB_CALL_CHECK(...) aborts on their error codes:
//   FB_CALL_CHECK(cudaStreamSynchronize(stream));
// Needs the CUDA headers: include it from .cu files and CUDA-aware .cc files only.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "common/call_check.h"

#if __has_include(<nccl.h>)
#include <nccl.h>
#define FULLBAND_CUDA_CALL_HAS_NCCL 1
#endif

namespace fullband {

template <>
struct CallTraits<cudaError_t> {
  static bool Succeeded(cudaError_t code) { return code == cudaSuccess; }
  static std::string ErrorString(cudaError_t code) {
    return std::string(cudaGetErrorName(code)) + ": " + cudaGetErrorString(code);
  }
};

template <>
struct CallTraits<cublasStatus_t> {
  static bool Succeeded(cublasStatus_t code) { return code == CUBLAS_STATUS_SUCCESS; }
  static std::string ErrorString(cublasStatus_t code) { return cublasGetStatusString(code); }
};

#ifdef FULLBAND_CUDA_CALL_HAS_NCCL
template <>
struct CallTraits<ncclResult_t> {
  static bool Succeeded(ncclResult_t code) { return code == ncclSuccess; }
  static std::string ErrorString(ncclResult_t code) { return ncclGetErrorString(code); }
};
#endif

}  // namespace fullband
