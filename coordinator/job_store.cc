#include "coordinator/job_store.h"

#include <utility>

#include "proto/coordinator_store.pb.h"
#include "proto/reflect_fields.h"

namespace fullband::coordinator {
namespace {

// Keys (coordinator/FORMAT.md): job/<id>/spec, job/<id>/state, step/<id>/<step>,
// ckpt/<id>/<step>, a step as 8 bytes big-endian so that a prefix scan visits steps in order.
std::string StateKey(const std::string& id) { return "job/" + id + "/state"; }
std::string SpecKey(const std::string& id) { return "job/" + id + "/spec"; }
std::string StepPrefix(const std::string& id) { return "step/" + id + "/"; }
std::string CheckpointPrefix(const std::string& id) { return "ckpt/" + id + "/"; }
std::string BigEndian(int64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((static_cast<uint64_t>(v) >> (56 - 8 * i)) & 0xff);
  return out;
}
int64_t FromBigEndian(std::string_view s) {
  uint64_t v = 0;
  for (char c : s) v = (v << 8) | static_cast<uint8_t>(c);
  return static_cast<int64_t>(v);
}
std::string StepKey(const std::string& id, int64_t step) {
  return StepPrefix(id) + BigEndian(step);
}
std::string CheckpointKey(const std::string& id, int64_t step) {
  return CheckpointPrefix(id) + BigEndian(step);
}
int64_t StepOfKey(std::string_view key) { return FromBigEndian(key.substr(key.size() - 8)); }

template <typename Message, typename T>
std::string Encode(const T& value) {
  Message message;
  StructToProto(value, &message);
  return message.SerializeAsString();
}

// DATA_LOSS when `bytes` is no Message; INVALID_ARGUMENT when a field holds an enum value the
// struct's enum lacks (proto/reflect_fields.h).
template <typename Message, typename T>
Status Decode(std::string_view bytes, T& value) {
  Message message;
  if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return DataLossError("not a " + message.GetTypeName());
  }
  return ProtoToStruct(message, value);
}

// DATA_LOSS when `bytes` is no StoredJobState, INVALID_ARGUMENT when its state is none.
Status ReadState(std::string_view bytes, JobRecord& record) {
  proto::StoredJobState message;
  if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return DataLossError("not a StoredJobState");
  }
  // Reflection leaves the struct's default for UNSPECIFIED; a stored state is never that.
  if (message.state() == proto::JOB_STATE_UNSPECIFIED) {
    return InvalidArgumentError("state: unspecified");
  }
  return ProtoToStruct(message, record);  // INVALID_ARGUMENT: a state this coordinator lacks
}

}  // namespace

std::string JobStore::EncodeState(const JobRecord& record) {
  return Encode<proto::StoredJobState>(record);
}

Status JobStore::DecodeState(std::string_view bytes, JobRecord& record) {
  const Status read = ReadState(bytes, record);
  if (read.ok()) return OkStatus();
  return DataLossError(read.message());
}

void JobStore::PutSpec(const std::string& id, const SpecRecord& record, WriteSet& writes) {
  writes.puts.emplace_back(SpecKey(id), Encode<proto::StoredJobSpec>(record));
}

void JobStore::PutState(const std::string& id, const JobRecord& record, WriteSet& writes) {
  writes.puts.emplace_back(StateKey(id), EncodeState(record));
}

void JobStore::PutStep(const std::string& id, int64_t step, const StepRecord& record,
                       WriteSet& writes) {
  writes.puts.emplace_back(StepKey(id, step), Encode<proto::StoredStep>(record));
}

void JobStore::DeleteStep(const std::string& id, int64_t step, WriteSet& writes) {
  writes.deletes.push_back(StepKey(id, step));
}

void JobStore::PutCheckpoint(const std::string& id, int64_t step, const CheckpointRecord& record,
                             WriteSet& writes) {
  writes.puts.emplace_back(CheckpointKey(id, step), Encode<proto::StoredCheckpoint>(record));
}

Status JobStore::DeleteCheckpointsAfter(const std::string& id, int64_t step,
                                        WriteSet& writes) const {
  const std::string prefix = CheckpointPrefix(id);
  return store_->Scan(prefix, [&](std::string_view key, std::string_view) {
    if (FromBigEndian(key.substr(prefix.size())) > step) writes.deletes.emplace_back(key);
    return OkStatus();
  });
}

StatusOr<std::vector<LoadedJob>> JobStore::Load() const {
  std::map<std::string, LoadedJob> specs;
  std::map<std::string, JobRecord> states;
  FB_RETURN_IF_ERROR(store_->Scan("job/", [&](std::string_view key, std::string_view value) {
    const size_t slash = key.rfind('/');
    const std::string id(key.substr(4, slash - 4));
    const std::string_view what = key.substr(slash + 1);
    Status read = DataLossError("an unknown record");
    if (what == "spec") read = Decode<proto::StoredJobSpec>(value, specs[id].submitted);
    if (what == "state") read = ReadState(value, states[id]);
    if (read.code() == StatusCode::kDataLoss) {
      return DataLossError("coordinator store: unreadable record " + std::string(key));
    }
    if (!read.ok()) return DataLossError("job " + id + ": " + read.message());
    return OkStatus();
  }));
  std::vector<LoadedJob> jobs;
  for (auto& [id, job] : specs) {
    auto state = states.find(id);
    if (state == states.end()) return DataLossError("job " + id + ": no state record");
    job.id = id;
    job.record = std::move(state->second);
    FB_RETURN_IF_ERROR(LoadCounted(job));
    jobs.push_back(std::move(job));
  }
  return jobs;
}

Status JobStore::LoadCounted(LoadedJob& job) const {
  return store_->Scan(StepPrefix(job.id), [&](std::string_view key, std::string_view value) {
    const int64_t step = StepOfKey(key);
    if (step < job.record.committed_step) return OkStatus();
    StepRecord record;
    if (!Decode<proto::StoredStep>(value, record).ok()) {  // no enums: only unreadable bytes
      return DataLossError("coordinator store: unreadable step record of job " + job.id);
    }
    job.counted[step] = record.passes;
    return OkStatus();
  });
}

StatusOr<HistoryPage> JobStore::History(const std::string& id, int64_t start_step,
                                        int64_t max_steps) const {
  HistoryPage page;
  const Status scanned = store_->Scan(
      StepPrefix(id),
      [&](std::string_view key, std::string_view value) {
        const int64_t step = StepOfKey(key);
        if (static_cast<int64_t>(page.steps.size()) == max_steps) {  // where the next page starts
          page.next_start_step = step;
          return OkStatus();
        }
        StepRecord record;
        if (!Decode<proto::StoredStep>(value, record).ok()) {
          return DataLossError("coordinator store: unreadable step record " + std::to_string(step) +
                               " of job " + id);
        }
        page.steps.emplace_back(step, std::move(record));
        return OkStatus();
      },
      StepKey(id, start_step), static_cast<size_t>(max_steps) + 1);
  if (!scanned.ok() && scanned.code() != StatusCode::kDataLoss) {
    return UnavailableError("job " + id + ": reading its history: " + scanned.message());
  }
  FB_RETURN_IF_ERROR(scanned);
  return page;
}

}  // namespace fullband::coordinator
