// JobStore: the coordinator's records in its Store (coordinator/FORMAT.md) — their keys, their
// encoding as proto/coordinator_store.proto messages, loading every job, and history pages. The
// coordinator decides what to write; JobStore only knows how it is kept. No proto types on its
// interface.
//
// The Put* and Delete* functions add to a WriteSet that the caller appends (Store::Append), so
// that the writes of one change are one batch. Thread-safe as the Store is.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "coordinator/job.h"
#include "coordinator/store.h"

namespace fullband::coordinator {

// What a submit stored (proto::StoredJobSpec, key job/<id>/spec), written once.
struct SpecRecord {
  JobSpec spec;
  double created_unix = 0;
  std::string request_id;  // the submitter's SubmitJobRequest.request_id ("" = none)
};

template <FieldsOf<SpecRecord> M, typename Visitor>
void VisitFields(M& s, Visitor&& visit) {
  visit("spec", s.spec);
  visit("created_unix", s.created_unix);
  visit("request_id", s.request_id);
}

// A job as loaded: its two records and its counted steps at or after the committed checkpoint.
struct LoadedJob {
  std::string id;
  SpecRecord submitted;  // its Config as stored, not validated
  JobRecord record;
  std::map<int64_t, int64_t> counted;  // step >= record.committed_step -> passes
};

// A committed checkpoint (proto::StoredCheckpoint, key ckpt/<id>/<step>).
struct CheckpointRecord {
  std::string path;
  int64_t shards = 0;  // 0: not known (a rollback)
  uint64_t incarnation = 0;
  double committed_unix = 0;
};

template <FieldsOf<CheckpointRecord> M, typename Visitor>
void VisitFields(M& c, Visitor&& visit) {
  visit("path", c.path);
  visit("shards", c.shards);
  visit("incarnation", c.incarnation);
  visit("committed_unix", c.committed_unix);
}

class JobStore {
 public:
  explicit JobStore(Store* store) : store_(store) {}  // not owned

  // Every job of the store, in id order. DATA_LOSS: an unreadable record, an enum value (a
  // state, a Config enum) this build lacks, an unspecified state, or a spec without a state
  // record. INTERNAL: the store cannot be read.
  StatusOr<std::vector<LoadedJob>> Load() const;

  // The counted steps of `id` from `start_step` on, at most `max_steps` (> 0). UNAVAILABLE when
  // the store cannot be read, DATA_LOSS for an unreadable step record.
  StatusOr<HistoryPage> History(const std::string& id, int64_t start_step, int64_t max_steps) const;

  // Deletes of the checkpoint records of `id` after `step`. INTERNAL: the store cannot be read.
  Status DeleteCheckpointsAfter(const std::string& id, int64_t step, WriteSet& writes) const;

  static void PutSpec(const std::string& id, const SpecRecord& record, WriteSet& writes);
  static void PutState(const std::string& id, const JobRecord& record, WriteSet& writes);
  static void PutStep(const std::string& id, int64_t step, const StepRecord& record,
                      WriteSet& writes);
  static void DeleteStep(const std::string& id, int64_t step, WriteSet& writes);
  static void PutCheckpoint(const std::string& id, int64_t step, const CheckpointRecord& record,
                            WriteSet& writes);

  // The records' encoding, for tests of the format: StoredJobState bytes. DATA_LOSS when
  // `bytes` is no StoredJobState or names no known state.
  static std::string EncodeState(const JobRecord& record);
  static Status DecodeState(std::string_view bytes, JobRecord& record);

 private:
  // The steps of `job` counted at or after its committed checkpoint, into job.counted.
  Status LoadCounted(LoadedJob& job) const;

  Store* store_;
};

}  // namespace fullband::coordinator
