// TLS credentials for the coordinator's gRPC port from PEM files, checked before gRPC sees
// them: each file is read and parsed, the key must match the certificate and the certificate
// must be within its validity period. Errors: NOT_FOUND (no such file), INVALID_ARGUMENT
// (unreadable, not PEM, mismatched key, expired), each naming the file. Stateless and
// thread-safe. scripts/gen_certs.sh makes a local CA and server certificate (TlsFiles) in
// $FULLBAND_TLS_DIR or ~/.config/fullband/tls (docs/COORDINATOR.md, "TLS").
#pragma once

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace fullband::coordinator {

// The files gen_certs.sh writes into one directory.
struct TlsFiles {
  std::string ca_cert;      // ca.crt: the CA bundle clients trust
  std::string server_cert;  // server.crt: the server's certificate (chain)
  std::string server_key;   // server.key: its private key (mode 0600)

  static TlsFiles InDir(const std::string& dir);
};

// Server side: `cert_file` (a certificate chain, leaf first) and `key_file`. With
// `client_ca_file`, clients must present a certificate signed by it (mutual TLS); without,
// no client certificate is requested.
StatusOr<grpc::SslServerCredentialsOptions> LoadServerTlsOptions(
    const std::string& cert_file, const std::string& key_file,
    const std::string& client_ca_file = "");
StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerTlsCredentials(
    const std::string& cert_file, const std::string& key_file,
    const std::string& client_ca_file = "");

// Client side: trust exactly the CAs in `ca_file` (at least one certificate).
StatusOr<grpc::SslCredentialsOptions> LoadClientTlsOptions(const std::string& ca_file);
StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeClientTlsCredentials(
    const std::string& ca_file);

}  // namespace fullband::coordinator
