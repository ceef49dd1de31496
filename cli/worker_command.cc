// `fullband worker`: one rank of a coordinated job's worker group, started by the coordinator's
// launcher as `mpirun -np TP×DP fullband worker` (docs/PARALLEL.md, "The worker group and the
// coordinator"). Rank 0 registers with the coordinator (FULLBAND_COORDINATOR, FULLBAND_JOB_ID,
// FULLBAND_ATTEMPT, FULLBAND_WORKER_TOKEN, FULLBAND_TLS_CA), heartbeats, leases steps and
// broadcasts the registration and every step to the group; every rank trains; rank 0 reports.
// Exit codes: 0 when the budget is spent or the coordinator ended the job; 1 on an error, after
// rank 0 has reported it (ReportFailure) where it could, with the whole group aborted so that
// no rank is left waiting for a dead peer; 2 on bad usage (a flag, or a variable the launcher
// sets, that does not parse), before anything starts.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli/backend_client_options.h"
#include "cli/commands.h"
#include "cli/coordinator_step_source.h"
#include "cli/options.h"
#include "cli/step_log.h"
#include "comm/mpi_communicator.h"
#include "common/failpoint.h"
#include "common/logging.h"
#include "coordinator/client.h"
#include "coordinator/launcher.h"
#include "proto/config_convert.h"
#include "worker/trainer.h"

namespace fullband::cli {
namespace {

struct WorkerArgs {
  // From the launcher, through the environment (AddWorker).
  coordinator::ClientOptions client;
  std::string job_id;
  int64_t attempt = 0;
  std::string job_dir;
  int64_t collective_timeout_s = 60;
  int64_t lease_timeout_s = 600;
  bool json = false;
  std::string failpoint;  // NAME@STEP, "" = none
  int64_t failpoint_rank = 0;
  ops::BackendOptions backend;  // device and threads: the job's runtime
};

struct Registration {
  Config config;
  int64_t resume_step = 0;
  int64_t total_steps = 0;
  std::string checkpoint_path;
};

// Rank 0 registers with the coordinator the launcher named.
StatusOr<std::unique_ptr<coordinator::WorkerClient>> RegisterRank0(const WorkerArgs& args,
                                                                   int world_size) {
  if (args.job_id.empty()) {
    return InvalidArgumentError(
        "FULLBAND_JOB_ID is not set: `fullband worker` is started by the coordinator's launcher");
  }
  return coordinator::WorkerClient::Register(args.client, args.job_id, args.attempt, world_size);
}

// Rank 0 registers; the registration (or its error) reaches every rank.
// `timeout` covers rank 0's retries of the coordinator.
StatusOr<Registration> Register(comm::Communicator& world, const WorkerArgs& args,
                                std::chrono::milliseconds timeout,
                                std::unique_ptr<coordinator::WorkerClient>* client) {
  StatusOr<std::string> mine = std::string();
  if (world.rank() == 0) {
    StatusOr<std::unique_ptr<coordinator::WorkerClient>> c = RegisterRank0(args, world.size());
    if (c.ok()) {
      *client = std::move(*c);
      mine = (*client)->registration().SerializeAsString();
    } else {
      mine = Status(c.status().code(), "register: " + c.status().message());
    }
  }
  FB_ASSIGN_OR_RETURN(const std::string bytes, comm::BroadcastResult(world, 0, mine, timeout));
  proto::RegisterWorkerGroupResponse r;
  if (!r.ParseFromString(bytes)) return InternalError("registration: unparsable broadcast");
  Registration out;
  FB_ASSIGN_OR_RETURN(out.config, FromProto(r.config()));
  out.resume_step = r.resume_step();
  out.total_steps = r.total_steps();
  out.checkpoint_path = r.checkpoint_path();
  return out;
}

// --failpoint NAME@STEP on rank --failpoint-rank of attempt 0 (a relaunch runs clean).
Status ArmFailpoint(const WorkerArgs& args, int rank) {
  if (args.failpoint.empty() || args.failpoint_rank != rank || args.attempt != 0) {
    return OkStatus();
  }
  return failpoint::Arm(args.failpoint);
}

// Where the job's checkpoints go: checkpoint.dir, or the job's directory that the coordinator
// names in FULLBAND_JOB_DIR.
std::string CheckpointRoot(const Config& config, const std::string& job_dir) {
  if (!config.checkpoint.dir.empty()) return config.checkpoint.dir;
  if (!job_dir.empty()) return job_dir + "/checkpoints";
  FB_LOG(WARNING) << "neither checkpoint.dir nor FULLBAND_JOB_DIR is set: this job saves no "
                     "checkpoints and restarts from step 0";
  return "";
}

// Restores the registration's checkpoint (or an older one, which the coordinator is told of);
// returns the sampler cursor to open the data at (none: from scratch).
StatusOr<std::optional<dataloader::SamplerCursor>> Resume(worker::Trainer& trainer,
                                                          Registration& reg,
                                                          coordinator::WorkerClient* client) {
  FB_ASSIGN_OR_RETURN(const worker::Trainer::Restored restored,
                      trainer.Restore(reg.checkpoint_path, /*scratch_last=*/true));
  const checkpoint::TrainingState& state = restored.state;
  if (state.step != reg.resume_step && client != nullptr) {
    FB_RETURN_IF_ERROR(
        client->RollBack(state.step, restored.path,
                         "checkpoint " + reg.checkpoint_path + ": " + restored.fallback_reason));
  }
  reg.resume_step = state.step;
  if (trainer.layout().tp_rank == 0 && trainer.layout().dp_rank == 0) {
    FB_LOG(INFO) << "resuming at step " << state.step << " from "
                 << (restored.path.empty() ? "scratch" : restored.path);
  }
  if (state.step == 0) return std::optional<dataloader::SamplerCursor>();
  dataloader::SamplerCursor cursor;
  cursor.draws = state.sampler_draws;
  for (const checkpoint::SourceCursor& c : state.sources) cursor.consumed.push_back(c.consumed);
  return std::optional<dataloader::SamplerCursor>(std::move(cursor));
}

// Everything after MPI is up; returns how the run ended.
StatusOr<worker::TrainSummary> Work(comm::Communicator& world, const WorkerArgs& args,
                                    std::unique_ptr<coordinator::WorkerClient>* client) {
  const auto lease_timeout = std::chrono::seconds(args.lease_timeout_s);
  world.set_timeout(std::chrono::seconds(args.collective_timeout_s));
  FB_RETURN_IF_ERROR(ArmFailpoint(args, world.rank()));
  FB_ASSIGN_OR_RETURN(Registration reg, Register(world, args, lease_timeout, client));
  const Config& config = reg.config;
  FB_ASSIGN_OR_RETURN(std::unique_ptr<ops::Backend> backend,
                      worker::CreateRuntimeBackend(config.runtime, args.backend));
  FB_ASSIGN_OR_RETURN(
      std::unique_ptr<worker::Trainer> trainer,
      worker::Trainer::Create(config, backend.get(), &world, CheckpointRoot(config, args.job_dir)));
  const comm::Layout& layout = trainer->layout();
  std::optional<dataloader::SamplerCursor> cursor;
  if (reg.resume_step != 0) {
    FB_ASSIGN_OR_RETURN(cursor, Resume(*trainer, reg, client->get()));
  }
  FB_ASSIGN_OR_RETURN(std::unique_ptr<worker::BatchSource> data,
                      worker::BatchSource::Open(config, layout.dp_rank, layout.dp, reg.resume_step,
                                                cursor ? &*cursor : nullptr));
  if (world.rank() == 0) {
    FB_LOG(INFO) << "worker group of " << world.size() << " rank(s) (dp " << layout.dp << ") on "
                 << backend->name() << ": steps " << reg.resume_step << ".." << reg.total_steps
                 << ", " << data->description();
  }
  CoordinatorStepSource steps(client->get(), &world, reg.total_steps, lease_timeout);
  const bool json = args.json;
  const int64_t every = config.runtime.log_every;
  return trainer->Run(steps, *data, [&](const worker::StepRecord& r) {
    if (world.rank() == 0 && LogThisStep(r, every)) PrintStepRecord(r, json);
  });
}

int RunWorker(const WorkerArgs& args) {
  StatusOr<comm::ProcessGroup> group = comm::JoinProcessGroup();
  if (!group.ok()) {
    std::fprintf(stderr, "fullband worker: %s\n", group.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<coordinator::WorkerClient> client;  // rank 0's, once registered
  StatusOr<worker::TrainSummary> summary = Work(*group->world, args, &client);
  if (!summary.ok()) {
    const int rank = group->world->rank();
    std::fprintf(stderr, "fullband worker: rank %d: %s\n", rank,
                 summary.status().ToString().c_str());
    if (client != nullptr) {
      const Status s = client->Fail("rank 0: " + summary.status().ToString());
      if (!s.ok())
        std::fprintf(stderr, "fullband worker: ReportFailure: %s\n", s.ToString().c_str());
    }
    client.reset();  // stops the heartbeat before the group goes
    if (group->mpi != nullptr) comm::MpiSession::Abort(1);
    return 1;
  }
  if (group->world->rank() == 0) {
    if (!summary->stop_reason.empty()) {
      std::printf("stopping: %s\n", summary->stop_reason.c_str());
    }
    PrintSummary(*summary, args.json);
  }
  return 0;
}

}  // namespace

Command AddWorker(CLI::App& fullband) {
  CLI::App* app = fullband.add_subcommand(
      "worker", "one rank of a coordinated job's worker group (started by the coordinator)");
  app->footer(
      "The coordinator's launcher starts it under mpirun and sets the environment variables of\n"
      "the launcher's options (docs/PARALLEL.md). Checkpoints go to checkpoint.dir, or to\n"
      "--job-dir/checkpoints when it is \"\". Failpoints: checkpoint.after_shard (its shard\n"
      "written, before the manifest), checkpoint.after_rename (rank 0: committed on disk, not\n"
      "yet reported).");
  auto args = std::make_shared<WorkerArgs>();
  app->option_defaults()->group("The launcher's options");
  AddClientOptions(*app, &args->client, coordinator::kWorkerTokenEnv);
  app->add_option("--job-id", args->job_id, "the job this group runs")
      ->envname(coordinator::kJobIdEnv);
  app->add_option("--attempt", args->attempt, "the job's attempt this group is")
      ->type_name("N")
      ->transform(IntIn(0))
      ->envname(coordinator::kAttemptEnv)
      ->capture_default_str();
  app->add_option("--job-dir", args->job_dir, "the job's directory")
      ->type_name("DIR")
      ->envname(coordinator::kJobDirEnv);
  app->option_defaults()->group("Options");
  app->add_option("--collective-timeout", args->collective_timeout_s,
                  "how long a rank waits for its peers in a collective before the group is "
                  "aborted")
      ->type_name("SECONDS")
      ->transform(IntIn(1))
      ->capture_default_str();
  app->add_option("--lease-timeout", args->lease_timeout_s,
                  "how long the ranks wait for rank 0's next step (its retries of the "
                  "coordinator included)")
      ->type_name("SECONDS")
      ->transform(IntIn(1))
      ->capture_default_str();
  app->add_flag("--json", args->json, "one JSON object per logged step and one for the summary");
  app->add_option("--failpoint", args->failpoint,
                  "crash tests: rank --failpoint-rank of attempt 0 kills itself at NAME@STEP")
      ->type_name("NAME@STEP");
  app->add_option("--failpoint-rank", args->failpoint_rank, "the rank --failpoint kills")
      ->type_name("R")
      ->transform(IntIn(0))
      ->capture_default_str();
  AddBackendOptions(*app, &args->backend);
  return {app, [args] { return RunWorker(*args); }};
}

}  // namespace fullband::cli
