// CudaBackend: ops::Backend on one GPU (ops/backend.h has every op's contract). All work is
// enqueued on one stream the backend owns, so ops run in call order and asynchronously; the
// host-facing calls (CopyToHost, CopyFromHost, SumSquares, Synchronize, Free) wait for it.
// Gemm is cuBLAS in full fp32 (CUBLAS_DEFAULT_MATH, no TF32); the other ops are the kernels
// declared in ops/cuda/kernels.h. Shapes, dtypes and devices are checked with FB_CHECK.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "common/logging.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_call.h"
#include "ops/cuda/kernels.h"

namespace fullband::ops {
namespace {

// ---- Argument checks, as strict as the CPU backend's (ops/cpu/): where it accepts any rank
// for an (N, D) tensor (RMSNorm, head gate, elementwise ops), D is the last axis and N the
// product of the others; embedding and feedback mix want rank 2 exactly.

void CheckTensor(const Tensor& t, DType dtype, const char* what) {
  FB_CHECK(t.device == Device::kCuda) << what << " is " << t.ToString() << ", want a cuda tensor";
  FB_CHECK(t.dtype == dtype) << what << " is " << t.ToString() << ", want " << DTypeName(dtype);
  FB_CHECK(t.data != nullptr || t.numel() == 0) << what << " " << t.ToString() << " has no data";
}

void CheckShape(const Tensor& t, const Shape& want, const char* what) {
  FB_CHECK(t.shape == want) << what << " has shape " << t.shape.ToString() << ", want "
                            << want.ToString();
}

void CheckSameShape(const Tensor& t, const Tensor& like, const char* what, const char* like_what) {
  FB_CHECK(t.shape == like.shape) << what << " has shape " << t.shape.ToString() << " but "
                                  << like_what << " has " << like.shape.ToString();
}

void CheckNumel(const Tensor& t, int64_t want, const char* what) {
  FB_CHECK(t.numel() == want) << what << " has shape " << t.shape.ToString() << ", want " << want
                              << " elements";
}

// D of a tensor read as (N, D).
int64_t Width(const Tensor& t, const char* what) {
  FB_CHECK_GE(t.rank(), 1) << what << " must have rank >= 1";
  return t.dim(t.rank() - 1);
}

// N of a tensor read as (N, D).
int64_t Rows(const Tensor& t, int64_t width) { return width == 0 ? 0 : t.numel() / width; }

class CudaBackend final : public Backend {
 public:
  static StatusOr<std::unique_ptr<Backend>> Create(int device_index);
  ~CudaBackend() override;

  Device device() const override { return Device::kCuda; }
  std::string name() const override { return name_; }

  StatusOr<void*> Allocate(size_t bytes) override;
  void Free(void* ptr) override;
  void CopyFromHost(void* dst, const void* host_src, size_t bytes) override;
  void CopyToHost(void* host_dst, const void* src, size_t bytes) override;
  void Copy(void* dst, const void* src, size_t bytes) override;
  void Fill(Tensor x, float value) override;
  void Zero(Tensor x) override;
  void Synchronize() override;

  using Backend::Gemm;  // the single-matrix overload
  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
            int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c,
            int64_t batch) override;

  void EmbeddingForward(Tensor out, Tensor table, Tensor ids) override;
  void EmbeddingBackward(Tensor dtable, Tensor dout, Tensor ids) override;
  void RmsNormForward(Tensor out, Tensor rstd, Tensor x, Tensor gain, float eps) override;
  void RmsNormBackward(Tensor dx, Tensor dgain, Tensor dout, Tensor x, Tensor gain,
                       Tensor rstd) override;
  void RopeForward(Tensor out, Tensor x, float theta) override;
  void RopeBackward(Tensor dx, Tensor dout, float theta) override;
  void AttentionForward(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                        const AttentionOptions& options) override;
  void AttentionBackward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q, Tensor k, Tensor v,
                         Tensor out, Tensor lse, const AttentionOptions& options) override;
  void HeadGateForward(Tensor out, Tensor x, Tensor gate) override;
  void HeadGateBackward(Tensor dx, Tensor dgate, Tensor dout, Tensor x, Tensor gate) override;
  void SwiGluForward(Tensor out, Tensor gate, Tensor up) override;
  void SwiGluBackward(Tensor dgate, Tensor dup, Tensor dout, Tensor gate, Tensor up) override;
  void ShiftRightForward(Tensor out, Tensor x) override;
  void ShiftRightBackward(Tensor dx, Tensor dout) override;
  void FeedbackMixForward(Tensor out, Tensor value, Tensor gate, Tensor e, Tensor plain) override;
  void FeedbackMixBackward(Tensor dvalue, Tensor dgate, Tensor de, Tensor dout, Tensor value,
                           Tensor gate, Tensor plain) override;
  void ResidualForward(Tensor x, Tensor branch, float scale) override;
  void ResidualBackward(Tensor dbranch, Tensor dx, float scale) override;
  void CrossEntropyForward(Tensor loss, Tensor lse, Tensor logits, int64_t ld, Tensor targets,
                           int32_t ignore_id) override;
  void CrossEntropyBackward(Tensor dlogits, Tensor logits, int64_t ld, Tensor lse, Tensor targets,
                            float ce_scale, float z_scale, int32_t ignore_id) override;
  void AdamWStep(Tensor param, Tensor grad, Tensor m, Tensor v,
                 const AdamWOptions& options) override;
  double SumSquares(Tensor x) override;
  void Scale(Tensor x, float alpha) override;

  int device_index() const { return device_; }
  cudaStream_t stream() const { return stream_; }

 private:
  explicit CudaBackend(int device) : device_(device) {}

  // Makes this backend's GPU current on the calling thread (a backend may move between
  // threads, and one process may hold backends on several GPUs).
  void Activate() const;

  int device_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  double* sum_scratch_ = nullptr;  // (kSumSquaresBlocks + 1) doubles for SumSquares
};

StatusOr<std::unique_ptr<Backend>> CudaBackend::Create(int device_index) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return UnavailableError(std::string("CUDA backend: no usable GPU (cudaGetDeviceCount: ") +
                            cudaGetErrorString(err) +
                            "); is an NVIDIA driver installed and a GPU visible?");
  }
  if (count == 0) return UnavailableError("CUDA backend: no GPU is visible");
  if (device_index < 0 || device_index >= count) {
    return UnavailableError("CUDA backend: GPU index " + std::to_string(device_index) +
                            " does not exist (" + std::to_string(count) + " visible)");
  }
  FB_RETURN_IF_ERROR(FB_CALL(cudaSetDevice(device_index)));
  cudaDeviceProp prop;
  FB_RETURN_IF_ERROR(FB_CALL(cudaGetDeviceProperties(&prop, device_index)));
  FB_RETURN_IF_ERROR(kernels::ProbeKernelImage().WithContext(std::string(prop.name) + " (sm_" +
                                                             std::to_string(prop.major) +
                                                             std::to_string(prop.minor) + ")"));

  // The destructor releases whatever was created if a later step fails.
  std::unique_ptr<CudaBackend> backend(new CudaBackend(device_index));
  backend->name_ = std::string("cuda (") + prop.name + ", sm_" + std::to_string(prop.major) +
                   std::to_string(prop.minor) + ")";
  FB_RETURN_IF_ERROR(FB_CALL(cudaStreamCreateWithFlags(&backend->stream_, cudaStreamNonBlocking)));
  FB_RETURN_IF_ERROR(FB_CALL(cublasCreate(&backend->cublas_)));
  FB_RETURN_IF_ERROR(FB_CALL(cublasSetStream(backend->cublas_, backend->stream_)));
  // Full fp32 products (no TF32), so Gemm matches the CPU backend to float rounding.
  FB_RETURN_IF_ERROR(FB_CALL(cublasSetMathMode(backend->cublas_, CUBLAS_DEFAULT_MATH)));
  FB_RETURN_IF_ERROR(FB_CALL(cudaMalloc(reinterpret_cast<void**>(&backend->sum_scratch_),
                                        sizeof(double) * (kernels::kSumSquaresBlocks + 1))));
  std::unique_ptr<Backend> result = std::move(backend);
  return StatusOr<std::unique_ptr<Backend>>(std::move(result));
}

CudaBackend::~CudaBackend() {
  if (cudaSetDevice(device_) != cudaSuccess) return;  // no usable device: nothing to release
  if (stream_ != nullptr) {
    const cudaError_t err = cudaStreamSynchronize(stream_);
    if (err != cudaSuccess) {
      FB_LOG(WARNING) << "CUDA backend: pending work failed at shutdown: "
                      << cudaGetErrorString(err);
    }
  }
  if (sum_scratch_ != nullptr) (void)cudaFree(sum_scratch_);
  if (cublas_ != nullptr) (void)cublasDestroy(cublas_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

void CudaBackend::Activate() const {
  int current = -1;
  FB_CALL_CHECK(cudaGetDevice(&current));
  if (current != device_) FB_CALL_CHECK(cudaSetDevice(device_));
}

// ---- Memory

StatusOr<void*> CudaBackend::Allocate(size_t bytes) {
  Activate();
  void* ptr = nullptr;
  // cudaMalloc aligns to at least 256 bytes; a 0-byte request still gets a distinct pointer.
  const cudaError_t err = cudaMalloc(&ptr, std::max<size_t>(bytes, 1));
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return ResourceExhaustedError("CUDA backend: out of memory allocating " +
                                  std::to_string(bytes) + " bytes on " + name_);
  }
  FB_RETURN_IF_ERROR(FB_CALL(err));
  return ptr;
}

void CudaBackend::Free(void* ptr) {
  if (ptr == nullptr) return;
  Activate();
  FB_CALL_CHECK(cudaStreamSynchronize(stream_));  // queued ops may still use the memory
  FB_CALL_CHECK(cudaFree(ptr));
}

// Synchronous with respect to host_src: the caller may reuse or free it on return.
void CudaBackend::CopyFromHost(void* dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  FB_CHECK(dst != nullptr && host_src != nullptr);
  Activate();
  FB_CALL_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
  FB_CALL_CHECK(cudaStreamSynchronize(stream_));
}

// Waits for all queued ops: host_dst holds the data on return.
void CudaBackend::CopyToHost(void* host_dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  FB_CHECK(host_dst != nullptr && src != nullptr);
  Activate();
  FB_CALL_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  FB_CALL_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::Copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  FB_CHECK(dst != nullptr && src != nullptr);
  Activate();
  FB_CALL_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::Fill(Tensor x, float value) {
  CheckTensor(x, DType::kF32, "Fill x");
  Activate();
  kernels::Fill(stream_, x.f32(), x.numel(), value);
}

void CudaBackend::Zero(Tensor x) {
  FB_CHECK(x.device == Device::kCuda) << "Zero x is " << x.ToString() << ", want a cuda tensor";
  if (x.bytes() == 0) return;
  FB_CHECK(x.data != nullptr) << "Zero x " << x.ToString() << " has no data";
  Activate();
  FB_CALL_CHECK(cudaMemsetAsync(x.data, 0, x.bytes(), stream_));
}

void CudaBackend::Synchronize() {
  Activate();
  FB_CALL_CHECK(cudaStreamSynchronize(stream_));
}

// ---- GEMM. cuBLAS is column-major and a row-major (r, c) matrix is its column-major
// transpose, so the row-major C = op(A) op(B) is computed as the column-major
// Cᵀ = op(B)ᵀ op(A)ᵀ: B's buffer goes first with trans_b, A's second with trans_a, and
// m and n swap.

void CudaBackend::Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
                       int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c,
                       int64_t batch) {
  FB_CHECK(m >= 0 && n >= 0 && k >= 0 && batch >= 0)
      << "Gemm m=" << m << " n=" << n << " k=" << k << " batch=" << batch;
  FB_CHECK_GE(lda, std::max<int64_t>(1, trans_a ? m : k)) << "Gemm lda";
  FB_CHECK_GE(ldb, std::max<int64_t>(1, trans_b ? k : n)) << "Gemm ldb";
  FB_CHECK_GE(ldc, std::max<int64_t>(1, n)) << "Gemm ldc";
  FB_CHECK(stride_a >= 0 && stride_b >= 0 && stride_c >= 0) << "Gemm strides";
  if (m == 0 || n == 0 || batch == 0) return;
  FB_CHECK(c != nullptr && (k == 0 || (a != nullptr && b != nullptr))) << "Gemm null operand";
  Activate();
  FB_CALL_CHECK(cublasSgemmStridedBatched_64(
      cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
      &alpha, b, ldb, stride_b, a, lda, stride_a, &beta, c, ldc, stride_c, batch));
}

// ---- Embedding

void CudaBackend::EmbeddingForward(Tensor out, Tensor table, Tensor ids) {
  CheckTensor(out, DType::kF32, "EmbeddingForward out");
  CheckTensor(table, DType::kF32, "EmbeddingForward table");
  CheckTensor(ids, DType::kI32, "EmbeddingForward ids");
  FB_CHECK_EQ(table.rank(), 2) << "EmbeddingForward table " << table.shape.ToString();
  FB_CHECK_EQ(ids.rank(), 1) << "EmbeddingForward ids " << ids.shape.ToString();
  const int64_t v = table.dim(0), d = table.dim(1), n = ids.dim(0);
  CheckShape(out, Shape{n, d}, "EmbeddingForward out");
  Activate();
  kernels::EmbeddingForward(stream_, out.f32(), table.f32(), ids.i32(), n, d, v);
}

void CudaBackend::EmbeddingBackward(Tensor dtable, Tensor dout, Tensor ids) {
  CheckTensor(dtable, DType::kF32, "EmbeddingBackward dtable");
  CheckTensor(dout, DType::kF32, "EmbeddingBackward dout");
  CheckTensor(ids, DType::kI32, "EmbeddingBackward ids");
  FB_CHECK_EQ(dtable.rank(), 2) << "EmbeddingBackward dtable " << dtable.shape.ToString();
  FB_CHECK_EQ(ids.rank(), 1) << "EmbeddingBackward ids " << ids.shape.ToString();
  const int64_t v = dtable.dim(0), d = dtable.dim(1), n = ids.dim(0);
  CheckShape(dout, Shape{n, d}, "EmbeddingBackward dout");
  Activate();
  kernels::EmbeddingBackward(stream_, dtable.f32(), dout.f32(), ids.i32(), n, d, v);
}

// ---- RMSNorm

void CudaBackend::RmsNormForward(Tensor out, Tensor rstd, Tensor x, Tensor gain, float eps) {
  CheckTensor(out, DType::kF32, "RmsNormForward out");
  CheckTensor(rstd, DType::kF32, "RmsNormForward rstd");
  CheckTensor(x, DType::kF32, "RmsNormForward x");
  CheckTensor(gain, DType::kF32, "RmsNormForward gain");
  const int64_t d = Width(x, "RmsNormForward x");
  const int64_t n = Rows(x, d);
  CheckSameShape(out, x, "RmsNormForward out", "x");
  CheckShape(gain, Shape{d}, "RmsNormForward gain");
  CheckNumel(rstd, n, "RmsNormForward rstd");
  Activate();
  kernels::RmsNormForward(stream_, out.f32(), rstd.f32(), x.f32(), gain.f32(), n, d, eps);
}

void CudaBackend::RmsNormBackward(Tensor dx, Tensor dgain, Tensor dout, Tensor x, Tensor gain,
                                  Tensor rstd) {
  CheckTensor(dx, DType::kF32, "RmsNormBackward dx");
  CheckTensor(dgain, DType::kF32, "RmsNormBackward dgain");
  CheckTensor(dout, DType::kF32, "RmsNormBackward dout");
  CheckTensor(x, DType::kF32, "RmsNormBackward x");
  CheckTensor(gain, DType::kF32, "RmsNormBackward gain");
  CheckTensor(rstd, DType::kF32, "RmsNormBackward rstd");
  const int64_t d = Width(x, "RmsNormBackward x");
  const int64_t n = Rows(x, d);
  CheckSameShape(dx, x, "RmsNormBackward dx", "x");
  CheckSameShape(dout, x, "RmsNormBackward dout", "x");
  CheckShape(gain, Shape{d}, "RmsNormBackward gain");
  CheckShape(dgain, Shape{d}, "RmsNormBackward dgain");
  CheckNumel(rstd, n, "RmsNormBackward rstd");
  Activate();
  kernels::RmsNormBackward(stream_, dx.f32(), dgain.f32(), dout.f32(), x.f32(), gain.f32(),
                           rstd.f32(), n, d);
}

// ---- RoPE

void CudaBackend::RopeForward(Tensor out, Tensor x, float theta) {
  CheckTensor(out, DType::kF32, "RopeForward out");
  CheckTensor(x, DType::kF32, "RopeForward x");
  FB_CHECK_EQ(x.rank(), 4) << "RopeForward x " << x.shape.ToString() << ", want (B, T, nH, Dh)";
  FB_CHECK(x.dim(3) % 2 == 0) << "RopeForward: Dh " << x.dim(3) << " is odd";
  FB_CHECK(theta > 0.0f) << "RopeForward theta " << theta;
  CheckSameShape(out, x, "RopeForward out", "x");
  Activate();
  kernels::Rope(stream_, out.f32(), x.f32(), x.dim(0), x.dim(1), x.dim(2), x.dim(3), theta,
                /*inverse=*/false);
}

void CudaBackend::RopeBackward(Tensor dx, Tensor dout, float theta) {
  CheckTensor(dx, DType::kF32, "RopeBackward dx");
  CheckTensor(dout, DType::kF32, "RopeBackward dout");
  FB_CHECK_EQ(dout.rank(), 4) << "RopeBackward dout " << dout.shape.ToString()
                              << ", want (B, T, nH, Dh)";
  FB_CHECK(dout.dim(3) % 2 == 0) << "RopeBackward: Dh " << dout.dim(3) << " is odd";
  FB_CHECK(theta > 0.0f) << "RopeBackward theta " << theta;
  CheckSameShape(dx, dout, "RopeBackward dx", "dout");
  Activate();
  kernels::Rope(stream_, dx.f32(), dout.f32(), dout.dim(0), dout.dim(1), dout.dim(2), dout.dim(3),
                theta, /*inverse=*/true);
}

// ---- Attention

// Checks q (B, T, H, Dh), k and v (B, T, Hkv, Dh), H % Hkv == 0, and the options; returns the
// sizes with the scale resolved.
kernels::AttentionDims AttentionShape(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const AttentionOptions& options, const char* op) {
  FB_CHECK_EQ(q.rank(), 4) << op << " q " << q.shape.ToString() << ", want (B, T, H, Dh)";
  FB_CHECK_EQ(k.rank(), 4) << op << " k " << k.shape.ToString() << ", want (B, T, Hkv, Dh)";
  kernels::AttentionDims dims;
  dims.b = q.dim(0);
  dims.t = q.dim(1);
  dims.h = q.dim(2);
  dims.dh = q.dim(3);
  dims.hkv = k.dim(2);
  CheckShape(k, Shape{dims.b, dims.t, dims.hkv, dims.dh}, op);
  CheckSameShape(v, k, op, "k");
  FB_CHECK(dims.hkv > 0 && dims.h % dims.hkv == 0)
      << op << ": H = " << dims.h << " is not a multiple of Hkv = " << dims.hkv;
  FB_CHECK(dims.dh > 0 && dims.dh <= kernels::kMaxAttentionHeadDim)
      << op << ": head dim " << dims.dh << " outside [1, " << kernels::kMaxAttentionHeadDim << "]";
  FB_CHECK_GE(options.window, 0) << op << " window";
  dims.window = options.window;
  dims.scale =
      options.scale != 0.0f ? options.scale : 1.0f / std::sqrt(static_cast<float>(dims.dh));
  return dims;
}

void CudaBackend::AttentionForward(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                                   const AttentionOptions& options) {
  CheckTensor(out, DType::kF32, "AttentionForward out");
  CheckTensor(lse, DType::kF32, "AttentionForward lse");
  CheckTensor(q, DType::kF32, "AttentionForward q");
  CheckTensor(k, DType::kF32, "AttentionForward k");
  CheckTensor(v, DType::kF32, "AttentionForward v");
  const kernels::AttentionDims dims = AttentionShape(q, k, v, options, "AttentionForward");
  CheckSameShape(out, q, "AttentionForward out", "q");
  CheckShape(lse, Shape{dims.b, dims.h, dims.t}, "AttentionForward lse");
  Activate();
  kernels::AttentionForward(stream_, out.f32(), lse.f32(), q.f32(), k.f32(), v.f32(), dims);
}

void CudaBackend::AttentionBackward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q,
                                    Tensor k, Tensor v, Tensor out, Tensor lse,
                                    const AttentionOptions& options) {
  CheckTensor(dq, DType::kF32, "AttentionBackward dq");
  CheckTensor(dk, DType::kF32, "AttentionBackward dk");
  CheckTensor(dv, DType::kF32, "AttentionBackward dv");
  CheckTensor(dout, DType::kF32, "AttentionBackward dout");
  CheckTensor(q, DType::kF32, "AttentionBackward q");
  CheckTensor(k, DType::kF32, "AttentionBackward k");
  CheckTensor(v, DType::kF32, "AttentionBackward v");
  CheckTensor(out, DType::kF32, "AttentionBackward out");
  CheckTensor(lse, DType::kF32, "AttentionBackward lse");
  const kernels::AttentionDims dims = AttentionShape(q, k, v, options, "AttentionBackward");
  CheckSameShape(dq, q, "AttentionBackward dq", "q");
  CheckSameShape(dout, q, "AttentionBackward dout", "q");
  CheckSameShape(out, q, "AttentionBackward out", "q");
  CheckSameShape(dk, k, "AttentionBackward dk", "k");
  CheckSameShape(dv, k, "AttentionBackward dv", "k");
  CheckShape(lse, Shape{dims.b, dims.h, dims.t}, "AttentionBackward lse");
  Activate();
  kernels::AttentionBackward(stream_, dq.f32(), dk.f32(), dv.f32(), dout.f32(), q.f32(), k.f32(),
                             v.f32(), out.f32(), lse.f32(), dims);
}

// ---- Head gate: x (..., Dh) with rank >= 2, gate one logit per Dh-row of x (e.g. (B, T, H)).

void CheckHeadGateShapes(const Tensor& x, const Tensor& gate, const char* op) {
  FB_CHECK_GE(x.rank(), 2) << op << " x " << x.shape.ToString() << ", want (N, H, Dh)";
  const int64_t dh = x.dim(x.rank() - 1);
  FB_CHECK(gate.numel() == Rows(x, dh))
      << op << " gate has shape " << gate.shape.ToString() << " but x has " << x.shape.ToString()
      << " (want one logit per head)";
}

void CudaBackend::HeadGateForward(Tensor out, Tensor x, Tensor gate) {
  CheckTensor(out, DType::kF32, "HeadGateForward out");
  CheckTensor(x, DType::kF32, "HeadGateForward x");
  CheckTensor(gate, DType::kF32, "HeadGateForward gate");
  CheckHeadGateShapes(x, gate, "HeadGateForward");
  CheckSameShape(out, x, "HeadGateForward out", "x");
  const int64_t dh = Width(x, "HeadGateForward x");
  Activate();
  kernels::HeadGateForward(stream_, out.f32(), x.f32(), gate.f32(), gate.numel(), dh);
}

void CudaBackend::HeadGateBackward(Tensor dx, Tensor dgate, Tensor dout, Tensor x, Tensor gate) {
  CheckTensor(dx, DType::kF32, "HeadGateBackward dx");
  CheckTensor(dgate, DType::kF32, "HeadGateBackward dgate");
  CheckTensor(dout, DType::kF32, "HeadGateBackward dout");
  CheckTensor(x, DType::kF32, "HeadGateBackward x");
  CheckTensor(gate, DType::kF32, "HeadGateBackward gate");
  CheckHeadGateShapes(x, gate, "HeadGateBackward");
  CheckSameShape(dx, x, "HeadGateBackward dx", "x");
  CheckSameShape(dout, x, "HeadGateBackward dout", "x");
  CheckSameShape(dgate, gate, "HeadGateBackward dgate", "gate");
  const int64_t dh = Width(x, "HeadGateBackward x");
  Activate();
  kernels::HeadGateBackward(stream_, dx.f32(), dgate.f32(), dout.f32(), x.f32(), gate.f32(),
                            gate.numel(), dh);
}

// ---- SwiGLU

void CudaBackend::SwiGluForward(Tensor out, Tensor gate, Tensor up) {
  CheckTensor(out, DType::kF32, "SwiGluForward out");
  CheckTensor(gate, DType::kF32, "SwiGluForward gate");
  CheckTensor(up, DType::kF32, "SwiGluForward up");
  CheckSameShape(up, gate, "SwiGluForward up", "gate");
  CheckSameShape(out, gate, "SwiGluForward out", "gate");
  Activate();
  kernels::SwiGluForward(stream_, out.f32(), gate.f32(), up.f32(), gate.numel());
}

void CudaBackend::SwiGluBackward(Tensor dgate, Tensor dup, Tensor dout, Tensor gate, Tensor up) {
  CheckTensor(dgate, DType::kF32, "SwiGluBackward dgate");
  CheckTensor(dup, DType::kF32, "SwiGluBackward dup");
  CheckTensor(dout, DType::kF32, "SwiGluBackward dout");
  CheckTensor(gate, DType::kF32, "SwiGluBackward gate");
  CheckTensor(up, DType::kF32, "SwiGluBackward up");
  CheckSameShape(up, gate, "SwiGluBackward up", "gate");
  CheckSameShape(dout, gate, "SwiGluBackward dout", "gate");
  CheckSameShape(dgate, gate, "SwiGluBackward dgate", "gate");
  CheckSameShape(dup, gate, "SwiGluBackward dup", "gate");
  Activate();
  kernels::SwiGluBackward(stream_, dgate.f32(), dup.f32(), dout.f32(), gate.f32(), up.f32(),
                          gate.numel());
}

// ---- Shift right along T

void CudaBackend::ShiftRightForward(Tensor out, Tensor x) {
  CheckTensor(out, DType::kF32, "ShiftRightForward out");
  CheckTensor(x, DType::kF32, "ShiftRightForward x");
  FB_CHECK_EQ(x.rank(), 3) << "ShiftRightForward x " << x.shape.ToString() << ", want (B, T, D)";
  CheckSameShape(out, x, "ShiftRightForward out", "x");
  FB_CHECK(out.data != x.data || x.numel() == 0) << "ShiftRightForward: out aliases x";
  Activate();
  kernels::ShiftRightForward(stream_, out.f32(), x.f32(), x.dim(0), x.dim(1), x.dim(2));
}

void CudaBackend::ShiftRightBackward(Tensor dx, Tensor dout) {
  CheckTensor(dx, DType::kF32, "ShiftRightBackward dx");
  CheckTensor(dout, DType::kF32, "ShiftRightBackward dout");
  FB_CHECK_EQ(dout.rank(), 3) << "ShiftRightBackward dout " << dout.shape.ToString()
                              << ", want (B, T, D)";
  CheckSameShape(dx, dout, "ShiftRightBackward dx", "dout");
  FB_CHECK(dx.data != dout.data || dout.numel() == 0) << "ShiftRightBackward: dx aliases dout";
  Activate();
  kernels::ShiftRightBackward(stream_, dx.f32(), dout.f32(), dout.dim(0), dout.dim(1), dout.dim(2));
}

// ---- Feedback mix

void CudaBackend::FeedbackMixForward(Tensor out, Tensor value, Tensor gate, Tensor e,
                                     Tensor plain) {
  CheckTensor(out, DType::kF32, "FeedbackMixForward out");
  CheckTensor(value, DType::kF32, "FeedbackMixForward value");
  CheckTensor(gate, DType::kF32, "FeedbackMixForward gate");
  CheckTensor(e, DType::kF32, "FeedbackMixForward e");
  CheckTensor(plain, DType::kU8, "FeedbackMixForward plain");
  FB_CHECK_EQ(e.rank(), 2) << "FeedbackMixForward e " << e.shape.ToString() << ", want (N, D)";
  const int64_t n = e.dim(0), d = e.dim(1);
  CheckSameShape(out, e, "FeedbackMixForward out", "e");
  CheckSameShape(value, e, "FeedbackMixForward value", "e");
  CheckSameShape(gate, e, "FeedbackMixForward gate", "e");
  CheckNumel(plain, n, "FeedbackMixForward plain");
  Activate();
  kernels::FeedbackMixForward(stream_, out.f32(), value.f32(), gate.f32(), e.f32(), plain.u8(), n,
                              d);
}

void CudaBackend::FeedbackMixBackward(Tensor dvalue, Tensor dgate, Tensor de, Tensor dout,
                                      Tensor value, Tensor gate, Tensor plain) {
  CheckTensor(dvalue, DType::kF32, "FeedbackMixBackward dvalue");
  CheckTensor(dgate, DType::kF32, "FeedbackMixBackward dgate");
  CheckTensor(de, DType::kF32, "FeedbackMixBackward de");
  CheckTensor(dout, DType::kF32, "FeedbackMixBackward dout");
  CheckTensor(value, DType::kF32, "FeedbackMixBackward value");
  CheckTensor(gate, DType::kF32, "FeedbackMixBackward gate");
  CheckTensor(plain, DType::kU8, "FeedbackMixBackward plain");
  FB_CHECK_EQ(dout.rank(), 2) << "FeedbackMixBackward dout " << dout.shape.ToString()
                              << ", want (N, D)";
  const int64_t n = dout.dim(0), d = dout.dim(1);
  CheckSameShape(dvalue, dout, "FeedbackMixBackward dvalue", "dout");
  CheckSameShape(dgate, dout, "FeedbackMixBackward dgate", "dout");
  CheckSameShape(de, dout, "FeedbackMixBackward de", "dout");
  CheckSameShape(value, dout, "FeedbackMixBackward value", "dout");
  CheckSameShape(gate, dout, "FeedbackMixBackward gate", "dout");
  CheckNumel(plain, n, "FeedbackMixBackward plain");
  Activate();
  kernels::FeedbackMixBackward(stream_, dvalue.f32(), dgate.f32(), de.f32(), dout.f32(),
                               value.f32(), gate.f32(), plain.u8(), n, d);
}

// ---- Residual

void CudaBackend::ResidualForward(Tensor x, Tensor branch, float scale) {
  CheckTensor(x, DType::kF32, "ResidualForward x");
  CheckTensor(branch, DType::kF32, "ResidualForward branch");
  CheckSameShape(branch, x, "ResidualForward branch", "x");
  Activate();
  kernels::ResidualForward(stream_, x.f32(), branch.f32(), scale, x.numel());
}

void CudaBackend::ResidualBackward(Tensor dbranch, Tensor dx, float scale) {
  CheckTensor(dbranch, DType::kF32, "ResidualBackward dbranch");
  CheckTensor(dx, DType::kF32, "ResidualBackward dx");
  CheckSameShape(dbranch, dx, "ResidualBackward dbranch", "dx");
  Activate();
  kernels::ScaledCopy(stream_, dbranch.f32(), dx.f32(), scale, dx.numel());
}

// ---- Cross-entropy

void CudaBackend::CrossEntropyForward(Tensor loss, Tensor lse, Tensor logits, int64_t ld,
                                      Tensor targets, int32_t ignore_id) {
  CheckTensor(loss, DType::kF32, "CrossEntropyForward loss");
  CheckTensor(lse, DType::kF32, "CrossEntropyForward lse");
  CheckTensor(logits, DType::kF32, "CrossEntropyForward logits");
  CheckTensor(targets, DType::kI32, "CrossEntropyForward targets");
  FB_CHECK_EQ(logits.rank(), 2) << "CrossEntropyForward logits " << logits.shape.ToString()
                                << ", want (N, V)";
  const int64_t n = logits.dim(0), v = logits.dim(1);
  FB_CHECK(v > 0 || n == 0) << "CrossEntropyForward: V = 0";
  FB_CHECK(ld >= v) << "CrossEntropyForward: row pitch " << ld << " < V = " << v;
  CheckNumel(targets, n, "CrossEntropyForward targets");
  CheckNumel(loss, n, "CrossEntropyForward loss");
  CheckNumel(lse, n, "CrossEntropyForward lse");
  Activate();
  kernels::CrossEntropyForward(stream_, loss.f32(), lse.f32(), logits.f32(), targets.i32(), n, v,
                               ld, ignore_id);
}

void CudaBackend::CrossEntropyBackward(Tensor dlogits, Tensor logits, int64_t ld, Tensor lse,
                                       Tensor targets, float ce_scale, float z_scale,
                                       int32_t ignore_id) {
  CheckTensor(dlogits, DType::kF32, "CrossEntropyBackward dlogits");
  CheckTensor(logits, DType::kF32, "CrossEntropyBackward logits");
  CheckTensor(lse, DType::kF32, "CrossEntropyBackward lse");
  CheckTensor(targets, DType::kI32, "CrossEntropyBackward targets");
  FB_CHECK_EQ(logits.rank(), 2) << "CrossEntropyBackward logits " << logits.shape.ToString()
                                << ", want (N, V)";
  const int64_t n = logits.dim(0), v = logits.dim(1);
  CheckSameShape(dlogits, logits, "CrossEntropyBackward dlogits", "logits");
  FB_CHECK(ld >= v) << "CrossEntropyBackward: row pitch " << ld << " < V = " << v;
  CheckNumel(targets, n, "CrossEntropyBackward targets");
  CheckNumel(lse, n, "CrossEntropyBackward lse");
  Activate();
  kernels::CrossEntropyBackward(stream_, dlogits.f32(), logits.f32(), lse.f32(), targets.i32(), n,
                                v, ld, ce_scale, z_scale, ignore_id);
}

// ---- Optimizer

void CudaBackend::AdamWStep(Tensor param, Tensor grad, Tensor m, Tensor v,
                            const AdamWOptions& options) {
  CheckTensor(param, DType::kF32, "AdamWStep param");
  CheckTensor(grad, DType::kF32, "AdamWStep grad");
  CheckTensor(m, DType::kF32, "AdamWStep m");
  CheckTensor(v, DType::kF32, "AdamWStep v");
  const int64_t n = param.numel();
  CheckNumel(grad, n, "AdamWStep grad");
  CheckNumel(m, n, "AdamWStep m");
  CheckNumel(v, n, "AdamWStep v");
  FB_CHECK_GE(options.step, 1) << "AdamWStep step";
  kernels::AdamWParams params;
  params.lr = options.lr;
  params.beta1 = options.beta1;
  params.beta2 = options.beta2;
  params.eps = options.eps;
  params.decay = 1.0f - options.lr * options.weight_decay;
  params.grad_scale = options.grad_scale;
  const double step = static_cast<double>(options.step);
  params.bias1 = static_cast<float>(1.0 - std::pow(static_cast<double>(options.beta1), step));
  params.bias2 = static_cast<float>(1.0 - std::pow(static_cast<double>(options.beta2), step));
  Activate();
  kernels::AdamW(stream_, param.f32(), grad.f32(), m.f32(), v.f32(), n, params);
}

double CudaBackend::SumSquares(Tensor x) {
  CheckTensor(x, DType::kF32, "SumSquares x");
  Activate();
  kernels::SumSquares(stream_, sum_scratch_, x.f32(), x.numel());
  double result = 0.0;
  FB_CALL_CHECK(cudaMemcpyAsync(&result, sum_scratch_ + kernels::kSumSquaresBlocks, sizeof(double),
                                cudaMemcpyDeviceToHost, stream_));
  FB_CALL_CHECK(cudaStreamSynchronize(stream_));
  return result;
}

void CudaBackend::Scale(Tensor x, float alpha) {
  CheckTensor(x, DType::kF32, "Scale x");
  Activate();
  kernels::ScaledCopy(stream_, x.f32(), x.f32(), alpha, x.numel());
}

}  // namespace

StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device_index) {
  return CudaBackend::Create(device_index);
}

StatusOr<CudaBackendStream> CudaBackendStreamOf(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (cuda == nullptr) {
    return InvalidArgumentError("backend " + backend.name() + " is not a CUDA backend");
  }
  return CudaBackendStream{cuda->device_index(), cuda->stream()};
}

bool CudaDeviceAvailable() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return count > 0;
}

}  // namespace fullband::ops
