// Authenticator: bearer tokens with roles (admin, user, worker) and the authorization checks
// of the coordinator's services (docs/DESIGN.md §7; operators' view in docs/COORDINATOR.md
// "Access"). Errors: UNAUTHENTICATED for a missing, malformed or unknown token; PERMISSION_DENIED
// for a known principal calling what its role or job does not allow. No message ever contains a
// token. Thread-safe: Authenticate may run on every RPC thread while tokens are minted,
// registered, revoked or reloaded.
#pragma once

#include <atomic>
#include <cstdint>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/config_fields.h"
#include "common/status.h"

namespace fullband::coordinator {

class PrometheusWriter;

enum class Role { kAdmin, kUser, kWorker };

// The one list of the roles' names, as the tokens file and errors spell them.
inline constexpr NameTable<Role, 3> kRoleNames{
    {{Role::kAdmin, "admin"}, {Role::kUser, "user"}, {Role::kWorker, "worker"}}};
constexpr const auto& EnumNames(Role) { return kRoleNames; }
constexpr std::string_view RoleName(Role role) { return NameOf(role); }

// Who is calling: the result of Authenticate.
struct Principal {
  Role role = Role::kUser;
  std::string user;    // admin/user: the `user` of the tokens file; worker: empty
  std::string job_id;  // worker: the job its token was minted for; otherwise empty
};

// The tokens file (YAML). Only admin and user tokens live here; worker tokens are minted per
// job by the coordinator and never written to this file.
//
//   version: 1                 # required; the format version
//   tokens:
//     - token: 9f86d081884c7d65...   # ≥ 32 characters of [A-Za-z0-9._~+/=-]
//       role: admin                  # admin | user
//       user: alice                  # [A-Za-z0-9._@-], 1..64 characters
//     - token: 60303ae22b998861...
//       role: user
//       user: bob
//
// Unknown keys, a missing field, a duplicate token or a `worker` role are errors naming the
// entry (`tokens[1].role`). `openssl rand -hex 32` makes a good token. The file should be
// readable by its owner only; a group- or world-readable file is loaded with a warning.
inline constexpr int kTokensFileVersion = 1;
inline constexpr size_t kMinTokenLength = 32;

class Authenticator {
 public:
  Authenticator() = default;  // no tokens: every request is UNAUTHENTICATED
  Authenticator(const Authenticator&) = delete;
  Authenticator& operator=(const Authenticator&) = delete;

  // Replaces the admin/user tokens with those of the tokens file at `path` (worker tokens are
  // kept); on error nothing changes, so this also serves to reload. Errors: NOT_FOUND (no such
  // file), INVALID_ARGUMENT (unreadable YAML or a bad entry, named with `path`).
  Status LoadTokensFile(const std::string& path);
  // The same from YAML text; `source` names it in errors.
  Status LoadTokensYaml(std::string_view yaml, std::string_view source);

  // A fresh worker token for `job_id`: 64 hex digits (256 bits from the OS CSPRNG). A job may
  // hold several (one per attempt). The caller persists (job_id, token) and hands it back
  // through RegisterWorkerToken after a restart. Errors: INVALID_ARGUMENT (empty job id),
  // INTERNAL (the CSPRNG failed).
  StatusOr<std::string> MintWorkerToken(std::string_view job_id);

  // Re-admits a worker token minted earlier (restored from durable state at startup).
  // Idempotent for the same (job, token). Errors: INVALID_ARGUMENT (empty job id, or a token
  // that is not 64 lowercase hex digits), ALREADY_EXISTS (the token belongs to someone else).
  Status RegisterWorkerToken(std::string_view job_id, std::string_view token);

  // The same by the token's digest (TokenDigestHex), which is what the coordinator stores.
  // Errors: INVALID_ARGUMENT (empty job id, not 64 lowercase hex digits), ALREADY_EXISTS.
  Status RegisterWorkerTokenDigest(std::string_view job_id, std::string_view digest_hex);

  // Forgets every worker token of `job_id` (the job ended); returns how many there were.
  int RevokeWorkerTokens(std::string_view job_id);

  // Checks an HTTP/gRPC `authorization` value, "Bearer <token>" (scheme case-insensitive).
  // UNAUTHENTICATED when it is empty, not a bearer credential, or an unknown token.
  // Note [Token comparison]: tokens are looked up by their SHA-256 digest, and the digest found
  // is compared with CRYPTO_memcmp, so the time taken depends on digests, never on how many
  // leading characters of a real token a caller guessed.
  StatusOr<Principal> Authenticate(std::string_view authorization_header) const;

  // How many admin/user and worker tokens are known.
  size_t static_token_count() const;
  size_t worker_token_count() const;

  // fullband_auth_requests_total{result="ok|missing|malformed|unknown"} and
  // fullband_auth_tokens{kind="static|worker"}.
  void RenderMetrics(PrometheusWriter& writer) const;

 private:
  struct Entry {
    Principal principal;
    std::string digest;  // SHA-256 of the token, 32 bytes
  };
  using Table = std::unordered_map<std::string, Entry>;  // keyed by digest

  mutable std::shared_mutex mu_;
  Table static_;  // admin and user tokens, from the tokens file
  Table worker_;  // minted or registered worker tokens

  mutable std::atomic<uint64_t> ok_{0}, missing_{0}, malformed_{0}, unknown_{0};
};

// The SHA-256 of a token as 64 lowercase hex digits: what may be stored in its place.
std::string TokenDigestHex(std::string_view token);

// Authorization checks. Each returns OK or PERMISSION_DENIED naming the rule broken.

// JobService (submit, get, list, watch, cancel): admins and users; workers are refused.
Status CheckJobService(const Principal& principal);
// A job owned by `owner`: admins see and cancel every job, a user only their own.
Status CheckJobOwner(const Principal& principal, std::string_view owner);
// WorkerService calls about `job_id`: only a worker token, and only the one minted for it.
Status CheckWorkerService(const Principal& principal, std::string_view job_id);

}  // namespace fullband::coordinator
