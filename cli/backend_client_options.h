// The options that fill ops::BackendOptions and coordinator::ClientOptions, with the environment
// fallbacks cli/options.h describes. Only fullband declares them; they are not in cli/options.h so
// that the programs under bench/, which link that header's library, need neither the ops nor the
// coordinator library for it.
#pragma once

#include <CLI/CLI.hpp>

#include "coordinator/client.h"
#include "ops/backend.h"

namespace fullband::cli {

// --cpu-isa (FULLBAND_CPU_ISA) and --cuda-plugin (FULLBAND_CUDA_PLUGIN), into *options.
void AddBackendOptions(CLI::App& app, ops::BackendOptions* options);

// --address (FULLBAND_COORDINATOR), --token (the variable `token_env`) and --tls-ca
// (FULLBAND_TLS_CA), into *options.
void AddClientOptions(CLI::App& app, coordinator::ClientOptions* options, const char* token_env);

}  // namespace fullband::cli
