// The model's weights as files: Model::LoadParameters, SaveParameters and SaveGradients
// (model.h), safetensors with docs/MODEL.md's keys (checkpoint/safetensors.h).
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/safetensors.h"
#include "common/check.h"
#include "model/model.h"

namespace fullband::model {

Status Model::LoadParameters(const std::string& path) {
  FB_ASSIGN_OR_RETURN(checkpoint::SafetensorsFile file, checkpoint::SafetensorsFile::Read(path));
  for (const auto& [name, entry] : file.entries()) {
    if (table_.Find(name) == nullptr) {
      return InvalidArgumentError(path + ": tensor " + name +
                                  " is not a parameter of this model config");
    }
  }
  for (const ParamSpec& spec : table_.specs()) {
    FB_ASSIGN_OR_RETURN(const checkpoint::SafetensorsFile::Entry* e,
                        file.Find(spec.name, checkpoint::StDType::kF32, spec.global_shape));
    const MatrixBox b = AsMatrix(spec);
    const auto* whole = reinterpret_cast<const float*>(file.data(*e));
    float* dst = Param(spec).f32();
    for (int64_t r = 0; r < b.box_rows; ++r) {  // this rank's box, a row at a time
      backend_->CopyFromHost(dst + r * b.box_cols, whole + b.WholeIndex(r),
                             b.box_cols * sizeof(float));
    }
  }
  return OkStatus();
}

namespace {

// Host copies of every tensor of an arena carved by `table`, named prefix + key.
std::vector<std::vector<float>> DownloadAll(ops::Backend& be, const ParameterTable& table,
                                            const float* base) {
  std::vector<std::vector<float>> out;
  for (const ParamSpec& spec : table.specs()) {
    out.emplace_back(spec.numel);
    be.CopyToHost(out.back().data(), base + spec.offset, spec.numel * sizeof(float));
  }
  return out;
}

}  // namespace

Status Model::SaveParameters(const std::string& path) const {
  if (table_.tp() > 1) {
    return FailedPreconditionError(
        path +
        ": a tensor-parallel rank holds a share of the model; its sharded checkpoint, "
        "exported by `fullband ckpt export`, is the whole model");
  }
  const std::vector<std::vector<float>> host = DownloadAll(*backend_, table_, params_all_.f32());
  std::vector<checkpoint::StTensorRef> refs;
  for (size_t i = 0; i < table_.specs().size(); ++i) {
    const ParamSpec& spec = table_.specs()[i];
    refs.push_back({spec.name, checkpoint::StDType::kF32, spec.shape, host[i].data()});
  }
  return checkpoint::WriteSafetensors(path, refs, {{"format", "pt"}, {"producer", "fullband"}});
}

Status Model::SaveGradients(const std::string& path,
                            const std::vector<std::pair<std::string, float>>& scalars,
                            const std::vector<std::pair<std::string, std::vector<uint8_t>>>& masks,
                            int64_t batch, int64_t seq) const {
  if (table_.tp() > 1) {
    return FailedPreconditionError(path + ": gradients are saved by one rank alone");
  }
  const std::vector<std::vector<float>> host = DownloadAll(*backend_, table_, grads_all_.f32());
  std::vector<checkpoint::StTensorRef> refs;
  for (const auto& [name, value] : scalars) {
    refs.push_back({name, checkpoint::StDType::kF32, {}, &value});
  }
  for (const auto& [name, mask] : masks) {
    FB_CHECK_EQ(static_cast<int64_t>(mask.size()), batch * seq);
    refs.push_back({name, checkpoint::StDType::kU8, {batch, seq}, mask.data()});
  }
  for (size_t i = 0; i < table_.specs().size(); ++i) {
    const ParamSpec& spec = table_.specs()[i];
    refs.push_back({"grad." + spec.name, checkpoint::StDType::kF32, spec.shape, host[i].data()});
  }
  return checkpoint::WriteSafetensors(path, refs, {{"format", "pt"}, {"producer", "fullband"}});
}

}  // namespace fullband::model
