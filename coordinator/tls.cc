// Loading and checking PEM files for gRPC TLS (tls.h), with OpenSSL doing the parsing.
#include "coordinator/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

namespace fullband::coordinator {
namespace {

struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioDeleter>;
using X509Ptr = std::unique_ptr<X509, X509Deleter>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyDeleter>;

StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  if (path.empty()) return InvalidArgumentError(std::string("tls: no ") + what + " file given");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    const std::string message =
        std::string("tls: ") + what + " file " + path + ": " + std::strerror(error);
    if (error == ENOENT) return NotFoundError(message);
    return InvalidArgumentError(message);
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return InvalidArgumentError(std::string("tls: cannot read ") + what + " " + path);
  return text.str();
}

BioPtr MemoryBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// The certificates in `pem`, in order; empty when it holds none.
std::vector<X509Ptr> ParseCertificates(const std::string& pem) {
  std::vector<X509Ptr> certs;
  BioPtr bio = MemoryBio(pem);
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certs.emplace_back(cert);
  }
  ERR_clear_error();  // the read that ended the loop leaves "no start line"
  return certs;
}

// INVALID_ARGUMENT when `cert` is not yet or no longer valid.
Status CheckValidity(X509* cert, const std::string& path) {
  if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0) {
    return InvalidArgumentError("tls: certificate " + path + " is not valid yet");
  }
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) {
    return InvalidArgumentError("tls: certificate " + path +
                                " has expired (scripts/gen_certs.sh --force renews it)");
  }
  return OkStatus();
}

// Reads a CA bundle and checks that it holds at least one valid certificate.
StatusOr<std::string> LoadCaBundle(const std::string& ca_file) {
  FB_ASSIGN_OR_RETURN(std::string ca, ReadPem(ca_file, "CA certificate"));
  std::vector<X509Ptr> certs = ParseCertificates(ca);
  if (certs.empty()) {
    return InvalidArgumentError("tls: CA file " + ca_file + " holds no PEM certificate");
  }
  for (X509Ptr& cert : certs) FB_RETURN_IF_ERROR(CheckValidity(cert.get(), ca_file));
  return ca;
}

}  // namespace

TlsFiles TlsFiles::InDir(const std::string& dir) {
  return {dir + "/ca.crt", dir + "/server.crt", dir + "/server.key"};
}

StatusOr<grpc::SslServerCredentialsOptions> LoadServerTlsOptions(
    const std::string& cert_file, const std::string& key_file, const std::string& client_ca_file) {
  FB_ASSIGN_OR_RETURN(std::string cert_pem, ReadPem(cert_file, "certificate"));
  FB_ASSIGN_OR_RETURN(std::string key_pem, ReadPem(key_file, "private key"));
  std::vector<X509Ptr> chain = ParseCertificates(cert_pem);
  if (chain.empty()) {
    return InvalidArgumentError("tls: certificate file " + cert_file + " holds no PEM certificate");
  }
  FB_RETURN_IF_ERROR(CheckValidity(chain[0].get(), cert_file));
  BioPtr key_bio = MemoryBio(key_pem);
  KeyPtr key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    return InvalidArgumentError("tls: private key file " + key_file +
                                " holds no unencrypted PEM private key");
  }
  if (X509_check_private_key(chain[0].get(), key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgumentError("tls: private key " + key_file +
                                " does not belong to the certificate " + cert_file);
  }
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({key_pem, cert_pem});
  if (!client_ca_file.empty()) {
    FB_ASSIGN_OR_RETURN(options.pem_root_certs, LoadCaBundle(client_ca_file));
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return options;
}

StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerTlsCredentials(
    const std::string& cert_file, const std::string& key_file, const std::string& client_ca_file) {
  FB_ASSIGN_OR_RETURN(grpc::SslServerCredentialsOptions options,
                      LoadServerTlsOptions(cert_file, key_file, client_ca_file));
  return grpc::SslServerCredentials(options);
}

StatusOr<grpc::SslCredentialsOptions> LoadClientTlsOptions(const std::string& ca_file) {
  grpc::SslCredentialsOptions options;
  FB_ASSIGN_OR_RETURN(options.pem_root_certs, LoadCaBundle(ca_file));
  return options;
}

StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeClientTlsCredentials(
    const std::string& ca_file) {
  FB_ASSIGN_OR_RETURN(grpc::SslCredentialsOptions options, LoadClientTlsOptions(ca_file));
  return grpc::SslCredentials(options);
}

}  // namespace fullband::coordinator
