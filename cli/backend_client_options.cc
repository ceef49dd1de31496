#include "cli/backend_client_options.h"

#include <string>

#include "coordinator/launcher.h"
#include "ops/cpu/simd_kernels.h"
#include "ops/cuda/plugin.h"

namespace fullband::cli {

void AddBackendOptions(CLI::App& app, ops::BackendOptions* options) {
  std::string isas;
  for (const std::string& isa : ops::cpu::SupportedSimdIsas()) {
    isas += (isas.empty() ? "" : ", ") + isa;
  }
  app.add_option("--cpu-isa", options->cpu_isa,
                 "instruction set of the CPU kernels, to compare them on one machine (this CPU "
                 "runs " +
                     isas + "; default: the widest)")
      ->type_name("ISA")
      ->envname("FULLBAND_CPU_ISA");
  app.add_option("--cuda-plugin", options->cuda_plugin,
                 "the CUDA backend's plugin, " FULLBAND_CUDA_PLUGIN_FILE
                 " (default: next to this program, then the build tree)")
      ->type_name("FILE")
      ->envname("FULLBAND_CUDA_PLUGIN");
}

void AddClientOptions(CLI::App& app, coordinator::ClientOptions* options, const char* token_env) {
  app.add_option("--address", options->address, "the coordinator's host:port")
      ->envname(coordinator::kCoordinatorEnv)
      ->capture_default_str();
  app.add_option("--token", options->token, "bearer token (docs/COORDINATOR.md, \"Access\")")
      ->envname(token_env);
  app.add_option("--tls-ca", options->tls_ca_file,
                 "CA certificate that signed the coordinator's (default: plaintext)")
      ->envname(coordinator::kTlsCaEnv);
}

}  // namespace fullband::cli
