// The coordinator's commands (README.md, "Command line"): `fullband coordinator` runs the service;
// submit, status, watch and cancel talk to it through coordinator/client.h. The address,
// token and CA come from --address/--token/--tls-ca, else FULLBAND_COORDINATOR /
// FULLBAND_TOKEN / FULLBAND_TLS_CA, else 127.0.0.1:7070 in plaintext without a token.
// Exit codes: 0 success (watch/submit --wait: the job COMPLETED), 1 the work or the job
// failed, 2 bad usage or input.
#include <google/protobuf/util/json_util.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/backend_client_options.h"
#include "cli/commands.h"
#include "common/config.h"
#include "coordinator/client.h"
#include "coordinator/service.h"
#include "proto/config_convert.h"

namespace fullband::cli {
namespace {

using coordinator::ClientOptions;
using coordinator::JobClient;

// What every command that talks to the coordinator is given.
struct ClientArgs {
  ClientOptions client;
  std::string job;  // the JOB (or JOB.yaml) positional
};

int Fail(const char* command, const Status& s) {
  std::fprintf(stderr, "fullband %s: %s\n", command, s.ToString().c_str());
  return s.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

StatusOr<std::unique_ptr<JobClient>> Connect(const ClientArgs& args) {
  ClientOptions o = args.client;
  o.max_attempts = 3;
  return JobClient::Connect(o);
}

std::string StateName(proto::JobState s) {
  std::string name = proto::JobState_Name(s);
  return name.substr(std::string("JOB_STATE_").size());
}

std::string Human(double v) {
  const char* units[] = {"", "k", "M", "G", "T", "P", "E"};
  int u = 0;
  while (std::fabs(v) >= 1000 && u < 6) {
    v /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f%s" : "%.2f%s", v, units[u]);
  return buf;
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string Duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  }
  return buf;
}

std::string BudgetUnit(const proto::Job& job) {
  switch (job.spec().config().budget().kind()) {
    case proto::BUDGET_KIND_TOKEN_EQUIVALENTS:
      return "token-equivalents";
    case proto::BUDGET_KIND_FLOPS:
      return "FLOPs";
    default:
      return "tokens";
  }
}

// One line of progress: state, budget spent, throughput, ETA and the loss of every pass.
std::string ProgressLine(const proto::Job& job, bool bar) {
  const double fraction =
      job.budget_amount() > 0 ? std::min(1.0, job.budget_spent() / job.budget_amount()) : 0;
  std::string out = job.id() + " " + StateName(job.state());
  if (bar) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth);
    out += " [" + std::string(filled, '#') + std::string(kWidth - filled, '-') + "]";
  }
  char buf[256];
  std::snprintf(buf, sizeof(buf), " %5.1f%% %s/%s %s, step %lld/%lld", 100 * fraction,
                Human(job.budget_spent()).c_str(), Human(job.budget_amount()).c_str(),
                BudgetUnit(job).c_str(), static_cast<long long>(job.ledger().steps()),
                static_cast<long long>(job.total_steps()));
  out += buf;
  const double tps = job.tokens_per_second();
  if (tps > 0) {
    const double tokens_left = static_cast<double>(job.total_steps() - job.ledger().steps()) *
                               static_cast<double>(job.spec().config().data().batch_size() *
                                                   job.spec().config().data().seq_len());
    out += ", " + Human(tps) + " tok/s, ETA " + Duration(tokens_left / tps);
  }
  if (job.ledger().last_losses_size() > 0) {
    out += ", loss";
    for (double l : job.ledger().last_losses()) {
      std::snprintf(buf, sizeof(buf), " %.4f", l);
      out += buf;
    }
  }
  if (job.attempt() > 0 || job.restarts() > 0) {
    out += ", attempt " + std::to_string(job.attempt()) + " (restarts " +
           std::to_string(job.restarts()) + ")";
  }
  if (!job.reason().empty() && job.state() != proto::JOB_STATE_RUNNING) {
    out += " (" + job.reason() + ")";
  }
  return out;
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(m, &out, options).ok()) return "{}";
  return out;
}

// Streams the job's events and returns 0 for COMPLETED. A terminal redraws its line on every
// event; otherwise a line is printed when the job's state, its counted steps or its restarts
// change (not for every heartbeat's new throughput).
int WatchJob(JobClient& client, const std::string& id) {
  const bool tty = ::isatty(STDOUT_FILENO);
  proto::Job last;
  bool printed = false;
  const Status s = client.Watch(id, [&](const proto::Job& job) {
    const bool changed = !printed || job.state() != last.state() ||
                         job.ledger().steps() != last.ledger().steps() ||
                         job.restarts() != last.restarts();
    last = job;
    if (tty) {
      std::printf("\r\033[K%s", ProgressLine(job, true).c_str());
    } else if (changed) {
      std::printf("%s\n", ProgressLine(job, false).c_str());
      printed = true;
    }
    std::fflush(stdout);
    return true;
  });
  if (tty) std::printf("\n");
  if (!s.ok()) return Fail("watch", s);
  return last.state() == proto::JOB_STATE_COMPLETED ? 0 : 1;
}

int RunCoordinator(const std::string& config_path) {
  StatusOr<coordinator::ServiceConfig> config = coordinator::LoadServiceConfig(config_path);
  if (!config.ok()) return Fail("coordinator", config.status());
  // Threads started below inherit the blocked signals; this thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  auto service = coordinator::CoordinatorService::Start(*config);
  if (!service.ok()) return Fail("coordinator", service.status());
  std::printf("fullband coordinator: serving on port %d\n", (*service)->port());
  if ((*service)->metrics_port() > 0) {
    std::printf("fullband coordinator: /metrics on port %d\n", (*service)->metrics_port());
  }
  std::fflush(stdout);
  int signal = 0;
  sigwait(&signals, &signal);
  std::fprintf(stderr, "fullband coordinator: signal %d, stopping\n", signal);
  (*service)->Stop();
  return 0;
}

struct SubmitArgs : ClientArgs {
  std::string name;  // "" = JOB.yaml's stem
  bool wait = false;
};

int RunSubmit(const SubmitArgs& args) {
  StatusOr<Config> config = LoadConfigFile(args.job);
  if (!config.ok()) return Fail("submit", config.status());
  proto::JobSpec spec;
  spec.set_name(args.name.empty() ? std::filesystem::path(args.job).stem().string() : args.name);
  *spec.mutable_config() = ToProto(*config);
  auto client = Connect(args);
  if (!client.ok()) return Fail("submit", client.status());
  StatusOr<std::string> id = (*client)->Submit(spec);
  if (!id.ok()) return Fail("submit", id.status());
  std::printf("%s\n", id->c_str());
  std::fflush(stdout);
  return args.wait ? WatchJob(**client, *id) : 0;
}

// The job's token-equivalents through each of `steps` (counted steps, in order).
std::vector<int64_t> TokenEquivalentsThrough(const std::vector<proto::StepRecord>& steps) {
  std::vector<int64_t> out;
  int64_t sum = 0;
  for (const proto::StepRecord& r : steps) out.push_back(sum += r.tokens() * r.passes());
  return out;
}

// `status JOB --history`: every counted step, a line each (or the GetJobHistory JSON).
int PrintHistory(JobClient& client, const std::string& job_id, bool json) {
  StatusOr<std::vector<proto::StepRecord>> steps = client.History(job_id);
  if (!steps.ok()) return Fail("status", steps.status());
  if (json) {
    proto::GetJobHistoryResponse all;
    all.mutable_steps()->Assign(steps->begin(), steps->end());
    all.set_next_start_step(-1);
    std::printf("%s\n", ToJson(all).c_str());
    return 0;
  }
  std::printf("%8s %7s %6s %8s %9s %10s  %s\n", "step", "attempt", "passes", "tokens", "step s",
              "tok-equiv", "loss per pass");
  const std::vector<int64_t> token_equivalents = TokenEquivalentsThrough(*steps);
  for (size_t i = 0; i < steps->size(); ++i) {
    const proto::StepRecord& r = (*steps)[i];
    std::string losses;
    for (double loss : r.losses()) losses += (losses.empty() ? "" : " ") + Fixed(loss, 4);
    std::printf("%8lld %7lld %6lld %8lld %9.3f %10s  %s\n", static_cast<long long>(r.step()),
                static_cast<long long>(r.attempt()), static_cast<long long>(r.passes()),
                static_cast<long long>(r.tokens()), r.step_seconds(),
                Human(static_cast<double>(token_equivalents[i])).c_str(), losses.c_str());
  }
  if (steps->empty()) std::printf("no counted steps yet\n");
  return 0;
}

// The gnuplot program that draws `steps` (loss of each pass against token-equivalents, a red
// line where a new attempt's steps begin) into the PNG file `out`.
std::string PlotScript(const proto::Job& job, const std::vector<proto::StepRecord>& steps,
                       const std::string& out) {
  std::string quoted;  // a gnuplot single-quoted string: '' is a quote
  for (char c : out) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  std::string script = "set terminal png size 1100,650\nset output '" + quoted + "'\n";
  script += "set title '" + job.id() + " (" + job.spec().name() + "): loss of each pass'\n";
  script += "set xlabel 'token-equivalents (tokens x passes)'\nset ylabel 'loss'\nset grid\n";
  const std::vector<int64_t> x = TokenEquivalentsThrough(steps);
  for (size_t i = 1; i < steps.size(); ++i) {
    if (steps[i].attempt() == steps[i - 1].attempt()) continue;
    const std::string at = std::to_string(x[i - 1]);
    script += "set arrow from " + at + ", graph 0 to " + at +
              ", graph 1 nohead lw 2 lc rgb 'red'\nset label 'restart: attempt " +
              std::to_string(steps[i].attempt()) + "' at " + at +
              ", graph 0.97 offset 0.5,0 tc rgb 'red'\n";
  }
  int64_t max_passes = 1;
  for (const proto::StepRecord& r : steps) max_passes = std::max(max_passes, r.passes());
  std::string plot = "plot ";
  for (int64_t k = 0; k < max_passes; ++k) {
    const std::string name = "$pass" + std::to_string(k + 1);
    script += name + " << EOD\n";
    for (size_t i = 0; i < steps.size(); ++i) {
      if (steps[i].losses_size() > k) {
        script += std::to_string(x[i]) + " " + Fixed(steps[i].losses(k), 6) + "\n";
      }
    }
    script += "EOD\n";
    plot += (k > 0 ? ", " : "") + name + " with linespoints lw 1.5 pt 7 ps 0.5 title 'pass " +
            std::to_string(k + 1) + "'";
  }
  return script + plot + "\n";
}

struct PlotArgs : ClientArgs {
  std::string out;
};

int RunPlot(const PlotArgs& args) {
  auto client = Connect(args);
  if (!client.ok()) return Fail("plot", client.status());
  const std::string& id = args.job;
  StatusOr<proto::Job> job = (*client)->Get(id);
  if (!job.ok()) return Fail("plot", job.status());
  StatusOr<std::vector<proto::StepRecord>> steps = (*client)->History(id);
  if (!steps.ok()) return Fail("plot", steps.status());
  if (steps->empty()) return Fail("plot", FailedPreconditionError(id + " has no counted steps"));
  const std::string& out = args.out;
  ::signal(SIGPIPE, SIG_IGN);  // a gnuplot that stops reading is an error below, not a kill
  FILE* gnuplot = ::popen("gnuplot >&2", "w");  // its complaints go to stderr
  if (gnuplot == nullptr) return Fail("plot", InternalError("cannot start gnuplot"));
  const std::string script = PlotScript(*job, *steps, out);
  std::fwrite(script.data(), 1, script.size(), gnuplot);
  const int status = ::pclose(gnuplot);
  if (status != 0) {
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return Fail(
        "plot",
        InternalError("gnuplot failed writing " + out + " (exit code " + std::to_string(code) +
                      (code == 127 ? ": not installed; Debian: gnuplot-nox)" : ")")));
  }
  std::printf("%s: %zu steps plotted to %s\n", id.c_str(), steps->size(), out.c_str());
  return 0;
}

struct StatusArgs : ClientArgs {
  bool all = false, json = false, history = false;
};

int RunStatus(const StatusArgs& args) {
  auto client = Connect(args);
  if (!client.ok()) return Fail("status", client.status());
  const bool json = args.json;
  if (args.history) return PrintHistory(**client, args.job, json);
  if (!args.job.empty()) {
    StatusOr<proto::Job> job = (*client)->Get(args.job);
    if (!job.ok()) return Fail("status", job.status());
    if (json) {
      std::printf("%s\n", ToJson(*job).c_str());
    } else {
      const proto::Ledger& l = job->ledger();
      std::printf("%s\n", ProgressLine(*job, false).c_str());
      std::printf("  name %s, owner %s, attempt %lld, committed step %lld %s\n",
                  job->spec().name().c_str(), job->spec().owner().c_str(),
                  static_cast<long long>(job->attempt()),
                  static_cast<long long>(job->committed_step()), job->checkpoint_path().c_str());
      std::printf("  tokens %s, token-equivalents %s, FLOPs %s, wall %s\n",
                  Human(static_cast<double>(l.tokens())).c_str(),
                  Human(static_cast<double>(l.token_equivalents())).c_str(),
                  Human(l.flops()).c_str(), Duration(l.wall_seconds()).c_str());
      std::printf("  passes:");
      // A proto map has no order; print by pass count.
      const std::map<int64_t, int64_t> histogram(l.pass_histogram().begin(),
                                                 l.pass_histogram().end());
      for (const auto& [k, n] : histogram) {
        std::printf(" %lld×%lld", static_cast<long long>(n), static_cast<long long>(k));
      }
      std::printf("\n  wasted by restarts: %lld steps, %s tokens, %s FLOPs\n",
                  static_cast<long long>(l.wasted_steps()),
                  Human(static_cast<double>(l.wasted_tokens())).c_str(),
                  Human(l.wasted_flops()).c_str());
    }
    return 0;
  }
  StatusOr<std::vector<proto::Job>> jobs = (*client)->List(args.all);
  if (!jobs.ok()) return Fail("status", jobs.status());
  if (json) {
    proto::ListJobsResponse list;
    for (const proto::Job& j : *jobs) *list.add_jobs() = j;
    std::printf("%s\n", ToJson(list).c_str());
  } else {
    if (jobs->empty()) std::printf("no jobs\n");
    for (const proto::Job& j : *jobs) std::printf("%s\n", ProgressLine(j, false).c_str());
  }
  return 0;
}

struct CancelArgs : ClientArgs {
  std::string reason;
};

int RunCancel(const CancelArgs& args) {
  auto client = Connect(args);
  if (!client.ok()) return Fail("cancel", client.status());
  StatusOr<proto::Job> job = (*client)->Cancel(args.job, args.reason);
  if (!job.ok()) return Fail("cancel", job.status());
  std::printf("%s\n", ProgressLine(*job, false).c_str());
  return 0;
}

// A subcommand that talks to the coordinator, as a user: its client flags, and the positional
// `job` (JOB, or JOB.yaml for submit).
CLI::App* ClientCommand(CLI::App& fullband, const char* name, const char* description,
                        ClientArgs* args, const char* job, const char* job_help) {
  CLI::App* app = fullband.add_subcommand(name, description);
  app->add_option(job, args->job, job_help)->required();
  AddClientOptions(*app, &args->client, "FULLBAND_TOKEN");
  return app;
}

}  // namespace

Command AddCoordinator(CLI::App& fullband) {
  CLI::App* app = fullband.add_subcommand(
      "coordinator", "run the coordinator: `fullband coordinator --config coordinator.yaml`");
  app->footer("Runs the coordinator until SIGINT/SIGTERM (docs/COORDINATOR.md, \"Jobs\").");
  auto config = std::make_shared<std::string>();
  app->add_option("--config", *config, "the coordinator's configuration (coordinator/service.h)")
      ->type_name("coordinator.yaml")
      ->required();
  return {app, [config] { return RunCoordinator(*config); }};
}

Command AddSubmit(CLI::App& fullband) {
  auto args = std::make_shared<SubmitArgs>();
  CLI::App* app = ClientCommand(
      fullband, "submit", "submit a job: `fullband submit JOB.yaml [--wait]` prints its id",
      args.get(), "JOB.yaml", "the job's configuration (docs/COORDINATOR.md)");
  app->add_option("--name", args->name, "the job's name (default: the file's stem)");
  app->add_flag("--wait", args->wait,
                "follow the job to its end; exit 0 when it completes, 1 when it fails or is "
                "cancelled");
  return {app, [args] { return RunSubmit(*args); }};
}

Command AddStatus(CLI::App& fullband) {
  auto args = std::make_shared<StatusArgs>();
  CLI::App* app = ClientCommand(
      fullband, "status",
      "show jobs: `fullband status [JOB] [--all] [--json]`, `status JOB --history`", args.get(),
      "JOB", "one job in full (default: every unfinished job, one a line)");
  CLI::Option* job = app->get_option("JOB")->required(false);
  app->add_flag("--all", args->all, "finished jobs too");
  app->add_flag("--json", args->json, "the coordinator's answer as JSON");
  app->add_flag("--history", args->history,
                "every counted step of JOB (attempt, passes, tokens, losses)")
      ->needs(job);
  return {app, [args] { return RunStatus(*args); }};
}

Command AddWatch(CLI::App& fullband) {
  auto args = std::make_shared<ClientArgs>();
  CLI::App* app = ClientCommand(
      fullband, "watch", "follow a job's budget, throughput and losses: `fullband watch JOB`",
      args.get(), "JOB", "the job to follow");
  app->footer(
      "A progress bar of the budget on a terminal, otherwise one line per counted step and per\n"
      "change of state. Exits 0 when the job completes, 1 when it fails or is cancelled.");
  return {app, [args] {
            auto client = Connect(*args);
            if (!client.ok()) return Fail("watch", client.status());
            return WatchJob(**client, args->job);
          }};
}

Command AddCancel(CLI::App& fullband) {
  auto args = std::make_shared<CancelArgs>();
  CLI::App* app = ClientCommand(fullband, "cancel", "cancel a job: `fullband cancel JOB`",
                                args.get(), "JOB", "the job to cancel");
  app->add_option("--reason", args->reason, "recorded with the job")->type_name("TEXT");
  return {app, [args] { return RunCancel(*args); }};
}

Command AddPlot(CLI::App& fullband) {
  auto args = std::make_shared<PlotArgs>();
  CLI::App* app = ClientCommand(fullband, "plot",
                                "plot a job's loss per pass: `fullband plot JOB --out FILE.png`",
                                args.get(), "JOB", "the job to plot");
  app->footer(
      "Draws the loss of each pass against token-equivalents from the job's history, with a\n"
      "line where each restart's steps begin (needs gnuplot; Debian: gnuplot-nox).");
  app->add_option("--out", args->out, "the PNG file to write")->type_name("FILE.png")->required();
  return {app, [args] { return RunPlot(*args); }};
}

}  // namespace fullband::cli
