// GrpcServer: the coordinator's gRPC transport (the outer layer, docs/DESIGN.md §7) on the callback
// API. The only file that includes grpcpp server headers and the only place a fullband Status
// becomes a grpc::Status. Every unary call runs the RpcHandler inline on a gRPC thread and
// finishes once the store has made its writes durable (RpcHandler::AfterDurable), so no thread
// blocks on the disk. WatchJob streams are fed by one poller thread. Standard gRPC health
// checking and server reflection are registered.
// Errors of Start: those of MakeServerTlsCredentials (tls.h), UNAVAILABLE (cannot bind).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "coordinator/rpc_handler.h"

namespace fullband::coordinator {

struct GrpcServerOptions {
  std::string address = "127.0.0.1:7070";  // host:port; port 0 picks a free one
  // PEM files; both empty = plaintext (only sensible on loopback).
  std::string tls_cert_file;
  std::string tls_key_file;
  int64_t max_message_bytes = 4 << 20;  // larger requests: RESOURCE_EXHAUSTED
  int watch_poll_ms = 200;              // how often WatchJob streams look for changes
};

class GrpcServer {
 public:
  // `handler` is not owned and must outlive the server.
  GrpcServer(GrpcServerOptions options, RpcHandler* handler);
  ~GrpcServer();  // Shutdown()
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  Status Start();
  // Ends open WatchJob streams (CANCELLED), stops accepting and waits for calls in flight.
  void Shutdown();
  // The bound port (after Start).
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fullband::coordinator
