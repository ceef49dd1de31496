#include "worker/checkpointer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>

#include "common/failpoint.h"
#include "common/logging.h"

namespace fullband::worker {
namespace {

namespace ck = checkpoint;

constexpr char kMomentM[] = "optim.m.";
constexpr char kMomentV[] = "optim.v.";

// This rank's box of `spec`'s whole tensor (all of it unless tensor parallelism splits it).
ck::TensorSlice BoxOf(const model::ParamSpec& spec) {
  ck::TensorSlice s = ck::WholeTensor(spec.shape);
  s.offset = spec.box_offset;
  return s;
}

// The part of `spec` in the arena range [begin, end), as a slice of the whole tensor (empty
// range when they do not meet).
ck::TensorSlice SliceIn(const model::ParamSpec& spec, int64_t begin, int64_t end) {
  ck::TensorSlice s = BoxOf(spec);
  s.begin = std::clamp(begin - spec.offset, int64_t{0}, spec.numel);
  s.end = std::clamp(end - spec.offset, s.begin, spec.numel);
  return s;
}

std::map<std::string, ck::GlobalTensor> GlobalTensors(const model::ParameterTable& table) {
  std::map<std::string, ck::GlobalTensor> out;
  for (const model::ParamSpec& spec : table.specs()) {
    for (const std::string prefix : {"", kMomentM, kMomentV}) {
      out[prefix + spec.name] = {ck::StDType::kF32, spec.global_shape};
    }
  }
  return out;
}

// INVALID_ARGUMENT unless the checkpoint holds exactly the tensors of `table`.
Status CheckSameModel(const ck::Manifest& m, const model::ParameterTable& table,
                      const std::string& dir) {
  const std::map<std::string, ck::GlobalTensor> mine = GlobalTensors(table);
  for (const auto& [name, t] : mine) {
    auto it = m.tensors.find(name);
    if (it == m.tensors.end()) {
      return InvalidArgumentError("checkpoint " + dir + " has no tensor " + name +
                                  ": it is of another model than this config's");
    }
    if (it->second != t) {
      return InvalidArgumentError("checkpoint " + dir + ": tensor " + name + " is " +
                                  ck::StDTypeName(it->second.dtype) + " " +
                                  ck::ShapeString(it->second.shape) + ", this model's is " +
                                  ck::ShapeString(t.shape) + ": another model");
    }
  }
  for (const auto& [name, t] : m.tensors) {
    if (!mine.count(name)) {
      return InvalidArgumentError("checkpoint " + dir + ": tensor " + name +
                                  " is not part of this config's model");
    }
  }
  return OkStatus();
}

std::string RandomToken() {
  std::random_device rd;
  return ck::HexXxh64(
      (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
}

}  // namespace

StatusOr<std::unique_ptr<Checkpointer>> Checkpointer::Create(Options options, model::Model* model,
                                                             model::AdamW* optimizer,
                                                             comm::Communicator* comm, int dp_rank,
                                                             int dp) {
  std::unique_ptr<Checkpointer> c(new Checkpointer(std::move(options), model, optimizer, comm));
  c->rank_ = comm->rank();
  const bool sharded_moments =
      optimizer->begin() != 0 || optimizer->end() != model->table().total_numel();
  if (sharded_moments) {  // ZeRO-1: the optimizer's own shard
    c->begin_ = optimizer->begin();
    c->end_ = optimizer->end();
  } else {
    const int64_t total = model->table().total_numel();
    c->begin_ = total * dp_rank / dp;
    c->end_ = total * (dp_rank + 1) / dp;
  }
  if (c->enabled()) {
    FB_ASSIGN_OR_RETURN(
        c->token_,
        comm::BroadcastResult(*comm, 0, comm->rank() == 0 ? RandomToken() : "", comm->timeout()));
    const size_t n = static_cast<size_t>(c->end_ - c->begin_);
    c->params_.resize(n);
    c->m_.resize(n);
    c->v_.resize(n);
  }
  return c;
}

Checkpointer::~Checkpointer() { Abandon(); }

bool Checkpointer::Due(int64_t steps_done, int64_t total_steps) const {
  if (!enabled() || steps_done <= 0) return false;
  if (steps_done == total_steps) return true;
  return options_.every_steps > 0 && steps_done % options_.every_steps == 0;
}

std::vector<ck::PieceRef> Checkpointer::Pieces() const {
  std::vector<ck::PieceRef> out;
  const model::ParameterTable& table = model_->table();
  for (const model::ParamSpec& spec : table.specs()) {
    if (!table.Owns(spec)) continue;  // a replicated parameter: TP rank 0's ranks write it
    const ck::TensorSlice s = SliceIn(spec, begin_, end_);
    if (s.numel() == 0) continue;
    const size_t at = static_cast<size_t>(spec.offset + s.begin - begin_);
    out.push_back({spec.name, spec.global_shape, s, params_.data() + at});
    out.push_back({kMomentM + spec.name, spec.global_shape, s, m_.data() + at});
    out.push_back({kMomentV + spec.name, spec.global_shape, s, v_.data() + at});
  }
  return out;
}

Status Checkpointer::Save(const ck::TrainingState& state, const CommitFn& commit) {
  FB_RETURN_IF_ERROR(Poll(/*wait=*/true, commit));
  const auto t0 = std::chrono::steady_clock::now();
  ops::Backend& be = model_->backend();
  const size_t bytes = params_.size() * sizeof(float);
  be.CopyToHost(params_.data(), model_->params().f32() + begin_, bytes);
  const int64_t moment_at = begin_ - optimizer_->begin();
  be.CopyToHost(m_.data(), optimizer_->m().f32() + moment_at, bytes);
  be.CopyToHost(v_.data(), optimizer_->v().f32() + moment_at, bytes);
  state_ = state;
  temp_dir_ = options_.root + "/" + ck::TempDirName(state.step, token_);
  written_ = false;
  in_flight_ = true;
  writer_ = std::thread([this] {
    write_status_ = ck::WriteShard(temp_dir_, rank_, Pieces()).status();
    failpoint::Hit("checkpoint.after_shard", state_.step);
    written_ = true;
  });
  stall_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return OkStatus();
}

Status Checkpointer::Poll(bool wait, const CommitFn& commit) {
  if (!in_flight_) return OkStatus();
  if (wait) writer_.join();
  const bool done = written_;
  int64_t flags[2] = {done ? 0 : 1, done && !write_status_.ok() ? 1 : 0};
  FB_RETURN_IF_ERROR(comm_->AllReduce(flags, 2, comm::CommType::kI64, comm::ReduceOp::kMax));
  if (flags[0] != 0) return OkStatus();  // a rank is still writing
  if (writer_.joinable()) writer_.join();
  in_flight_ = false;
  Status s = write_status_;
  if (flags[1] != 0) FB_RETURN_IF_ERROR(FirstWriteError(&s));
  if (s.ok() && rank_ == 0) s = Commit(commit);
  if (s.ok()) {
    failures_ = 0;
    return OkStatus();
  }
  ++failures_;
  if (rank_ == 0) {  // every rank is done with it
    std::error_code ec;
    std::filesystem::remove_all(temp_dir_, ec);
  }
  const std::string what = "checkpoint of step " + std::to_string(state_.step) + " failed (" +
                           std::to_string(failures_) + " in a row): " + s.ToString();
  if (failures_ >= options_.max_failures) return Status(s.code(), what);
  if (!write_status_.ok() || rank_ == 0) FB_LOG(WARNING) << what << "; training goes on";
  return OkStatus();
}

// A rank failed to write its shard: every rank learns the first failed rank's error, so that
// rank 0 reports the cause (a full disk, a permission) and not just that some rank failed.
Status Checkpointer::FirstWriteError(Status* s) {
  constexpr int64_t kBytes = 512;  // of each rank's message
  std::string mine(kBytes, '\0');
  if (!write_status_.ok()) {
    const std::string text = "rank " + std::to_string(rank_) + ": " + write_status_.message();
    mine.replace(0, std::min<size_t>(text.size(), kBytes - 1), text, 0, kBytes - 1);
  }
  std::string all(static_cast<size_t>(kBytes * comm_->size()), '\0');
  FB_RETURN_IF_ERROR(comm_->AllGather(mine.data(), all.data(), kBytes, comm::CommType::kU8));
  if (!s->ok()) return OkStatus();  // this rank's own error says it
  for (int r = 0; r < comm_->size(); ++r) {
    const char* text = all.data() + r * kBytes;
    if (text[0] != '\0') {
      *s = InternalError(std::string(text, strnlen(text, kBytes)));
      break;
    }
  }
  return OkStatus();
}

Status Checkpointer::Commit(const CommitFn& commit) {
  std::error_code ec;
  const std::string root = std::filesystem::absolute(options_.root, ec).lexically_normal();
  FB_ASSIGN_OR_RETURN(
      const std::string path,
      ck::CommitShards(root, temp_dir_, comm_->size(), state_, GlobalTensors(model_->table())));
  failpoint::Hit("checkpoint.after_rename", state_.step);
  if (commit) FB_RETURN_IF_ERROR(commit(state_.step, path, comm_->size()));
  return ck::PruneCheckpoints(root, state_.step, options_.keep, token_);
}

void Checkpointer::Abandon() {
  if (writer_.joinable()) writer_.join();
  in_flight_ = false;
}

StatusOr<ck::TrainingState> Checkpointer::Restore(const std::string& dir) {
  FB_ASSIGN_OR_RETURN(std::unique_ptr<ck::CheckpointReader> reader,
                      ck::CheckpointReader::Open(dir));
  const model::ParameterTable& table = model_->table();
  FB_RETURN_IF_ERROR(CheckSameModel(reader->manifest(), table, dir));
  // Everything is read (and checked) into host memory before the model is touched.
  std::vector<float> params(static_cast<size_t>(table.total_numel()), 0.0f);
  const int64_t mb = optimizer_->begin(), me = optimizer_->end();
  std::vector<float> m(static_cast<size_t>(me - mb)), v(m.size());
  for (const model::ParamSpec& spec : table.specs()) {
    FB_RETURN_IF_ERROR(reader->Read(spec.name, BoxOf(spec), params.data() + spec.offset));
    const ck::TensorSlice s = SliceIn(spec, mb, me);
    if (s.numel() == 0) continue;
    const size_t at = static_cast<size_t>(spec.offset + s.begin - mb);
    FB_RETURN_IF_ERROR(reader->Read(kMomentM + spec.name, s, m.data() + at));
    FB_RETURN_IF_ERROR(reader->Read(kMomentV + spec.name, s, v.data() + at));
  }
  ops::Backend& be = model_->backend();
  be.CopyFromHost(model_->params().f32(), params.data(), params.size() * sizeof(float));
  be.CopyFromHost(optimizer_->m().f32(), m.data(), m.size() * sizeof(float));
  be.CopyFromHost(optimizer_->v().f32(), v.data(), v.size() * sizeof(float));
  be.Synchronize();
  return reader->manifest().state;
}

}  // namespace fullband::worker
