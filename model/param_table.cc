#include "model/param_table.h"

#include <cmath>

#include "common/check.h"

namespace fullband::model {

void ParameterTable::Add(const ParamDef& def) {
  const std::vector<int64_t>& global_shape = def.shape;
  const TpSplit split = def.split;
  ParamSpec spec;
  spec.role = def.role;
  spec.layer = def.layer;
  spec.name = ParamName(def.role, def.layer);
  spec.shape = global_shape;
  spec.box_offset.assign(global_shape.size(), 0);
  if (split != TpSplit::kReplicated) {
    const size_t axis = split == TpSplit::kRows ? 0 : 1;
    FB_CHECK(axis < global_shape.size() && global_shape[axis] % tp_ == 0)
        << spec.name << ": tp " << tp_ << " does not divide axis " << axis;
    spec.shape[axis] = global_shape[axis] / tp_;
    spec.box_offset[axis] = spec.shape[axis] * tp_rank_;
  }
  spec.global_shape = global_shape;
  spec.split = split;
  spec.numel = 1;
  for (int64_t d : spec.shape) spec.numel *= d;
  spec.kind = def.kind;
  spec.init_std = def.init_std;
  constexpr int64_t kAlign = 16;  // floats: every tensor starts on a 64-byte boundary
  spec.offset = (total_ + kAlign - 1) / kAlign * kAlign;
  total_ = spec.offset + spec.numel;
  const size_t slot =
      static_cast<size_t>((def.layer + 1) * kParamRoles + static_cast<int>(def.role));
  if (by_role_.size() <= slot) by_role_.resize(slot + 1, -1);
  by_role_[slot] = static_cast<int>(specs_.size());
  specs_.push_back(std::move(spec));
}

ParameterTable ParameterTable::Build(const ModelConfig& m, int tp, int tp_rank) {
  FB_CHECK(tp >= 1 && tp_rank >= 0 && tp_rank < tp) << "tp rank " << tp_rank << " of " << tp;
  ParameterTable t;
  t.tp_ = tp;
  t.tp_rank_ = tp_rank;
  for (const ParamDef& def : ModelParameters(m)) t.Add(def);
  return t;
}

MatrixBox AsMatrix(const ParamSpec& spec) {
  if (spec.shape.size() == 1) return {1, spec.global_shape[0], 0, 0, 1, spec.shape[0]};
  FB_CHECK_EQ(spec.shape.size(), 2u) << spec.name;
  return {spec.global_shape[0], spec.global_shape[1], spec.box_offset[0],
          spec.box_offset[1],   spec.shape[0],        spec.shape[1]};
}

ops::Tensor ViewOf(const ParamSpec& spec, float* arena_base, ops::Device device) {
  ops::Shape shape;
  for (int64_t d : spec.shape) shape.dims[shape.rank++] = d;
  return ops::Tensor(arena_base + spec.offset, ops::DType::kF32, shape, device);
}

const ParamSpec* ParameterTable::Find(ParamRole role, int64_t layer) const {
  const size_t slot = static_cast<size_t>((layer + 1) * kParamRoles + static_cast<int>(role));
  if (layer < -1 || slot >= by_role_.size() || by_role_[slot] < 0) return nullptr;
  return &specs_[by_role_[slot]];
}

const ParamSpec& ParameterTable::Get(ParamRole role, int64_t layer) const {
  const ParamSpec* spec = Find(role, layer);
  FB_CHECK(spec != nullptr) << ParamName(role, layer) << " is not in the table";
  return *spec;
}

const ParamSpec* ParameterTable::Find(const std::string& name) const {
  for (const ParamSpec& s : specs_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

}  // namespace fullband::model
