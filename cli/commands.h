// The subcommands of the fullband binary. Each takes the arguments after its name and returns
// the process exit code: 0 success, 1 failure of the work, 2 bad usage or bad input.
#pragma once

#include <string>
#include <vector>

namespace fullband::cli {

int RunBackends(const std::vector<std::string>& args);
int RunConfig(const std::vector<std::string>& args);
int RunModel(const std::vector<std::string>& args);
int RunTrain(const std::vector<std::string>& args);
int RunWorker(const std::vector<std::string>& args);  // worker_command.cc
int RunCkpt(const std::vector<std::string>& args);    // ckpt_command.cc
int RunIngest(const std::vector<std::string>& args);
int RunData(const std::vector<std::string>& args);
int RunTokenize(const std::vector<std::string>& args);
int RunCoordinator(const std::vector<std::string>& args);  // coordinator_commands.cc
int RunSubmit(const std::vector<std::string>& args);
int RunStatus(const std::vector<std::string>& args);
int RunWatch(const std::vector<std::string>& args);
int RunCancel(const std::vector<std::string>& args);
int RunPlot(const std::vector<std::string>& args);

}  // namespace fullband::cli
