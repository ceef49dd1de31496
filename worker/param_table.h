// ParameterTable: the one table of the model's parameters — name (the safetensors key of
// docs/MODEL.md), shape, element offset — that carves the parameter, gradient and optimizer
// arenas alike (llm.c). Every tensor is a contiguous, 16-float-aligned range, so a
// tensor-parallel slice (rows of a matrix, a vocabulary range) or a data-parallel optimizer
// shard is an offset range of the same table, never a copy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status.h"
#include "ops/tensor.h"

namespace fullband::worker {

// What a parameter is, for weight decay and initialization.
enum class ParamKind {
  kEmbedding,  // the tied embedding / readout table
  kMatrix,     // a projection matrix
  kNormGain,   // an RMSNorm gain
};

struct ParamSpec {
  std::string name;            // "layers.3.attn.wq.weight"
  std::vector<int64_t> shape;  // (rows, cols) in PyTorch Linear convention, or (D)
  int64_t offset = 0;          // in floats, from the start of the arena
  int64_t numel = 0;
  ParamKind kind = ParamKind::kMatrix;
  double init_std = 0.0;  // N(0, init_std²) for matrices and the embedding; gains start at 1
};

// The view of `spec` inside an arena carved by the table (parameters, gradients, moments).
ops::Tensor ViewOf(const ParamSpec& spec, float* arena_base, ops::Device device);

class ParameterTable {
 public:
  // The table of DESIGN Appendix A for a validated model config.
  static ParameterTable Build(const ModelConfig& config);

  const std::vector<ParamSpec>& specs() const { return specs_; }
  int64_t total_numel() const { return total_; }
  // The spec named `name`, or nullptr.
  const ParamSpec* Find(const std::string& name) const;
  // The number of parameters (no padding), as counted for model FLOPs.
  int64_t CountParameters() const;

 private:
  void Add(std::string name, std::vector<int64_t> shape, ParamKind kind, double init_std);

  std::vector<ParamSpec> specs_;
  int64_t total_ = 0;
};

}  // namespace fullband::worker
