// Authenticator and the authorization checks (auth.h).
#include "coordinator/auth.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <initializer_list>
#include <mutex>
#include <vector>

#include "common/file_util.h"
#include "common/logging.h"
#include "common/yaml_util.h"
#include "coordinator/metrics_http.h"

namespace fullband::coordinator {
namespace {

Status Unauthenticated(std::string message) {
  return Status(StatusCode::kUnauthenticated, std::move(message));
}
Status PermissionDenied(std::string message) {
  return Status(StatusCode::kPermissionDenied, std::move(message));
}

std::string Sha256(std::string_view text) {
  std::string digest(SHA256_DIGEST_LENGTH, '\0');
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(),
         reinterpret_cast<unsigned char*>(digest.data()));
  return digest;
}

bool FromHex(std::string_view hex, std::string* out) {
  out->clear();
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    const auto nibble = [](char c) {
      return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    };
    const int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi << 4 | lo));
  }
  return hex.size() % 2 == 0;
}

// RFC 6750 token68 characters.
bool IsTokenChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~' || c == '+' || c == '/' || c == '=';
}

bool IsUserChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '@' || c == '-';
}

bool IsWorkerToken(std::string_view token) {
  if (token.size() != 64) return false;
  for (char c : token) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// INVALID_ARGUMENT naming `at` for a key of `map` that is not one of `keys`.
Status CheckKeys(const YAML::Node& map, std::initializer_list<std::string_view> keys,
                 const std::string& at) {
  for (const auto& kv : map) {
    const std::string key = kv.first.as<std::string>("");
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      return InvalidArgumentError(at + ": unknown key `" + key + "`");
    }
  }
  return OkStatus();
}

// The tokens file's `version`: kTokensFileVersion, else INVALID_ARGUMENT.
Status CheckVersion(const YAML::Node& root, const std::string& where) {
  const YAML::Node version = root["version"];
  if (!version || !version.IsScalar()) {
    return InvalidArgumentError(where + ": `version` is missing (expected " +
                                std::to_string(kTokensFileVersion) + ")");
  }
  if (version.Scalar() != std::to_string(kTokensFileVersion)) {
    return InvalidArgumentError(where + ": `version` is " + version.Scalar() +
                                ", this coordinator reads version " +
                                std::to_string(kTokensFileVersion));
  }
  return OkStatus();
}

// One entry of the tokens file's list, {token, role, user}, found at `at`: its principal, and
// its token in *token. INVALID_ARGUMENT naming the field; the message never holds the token.
StatusOr<Principal> ReadTokenEntry(const YAML::Node& item, const std::string& at,
                                   std::string* token) {
  if (!item.IsMap()) return InvalidArgumentError(at + " must be a mapping");
  FB_RETURN_IF_ERROR(CheckKeys(item, {"token", "role", "user"}, at));
  for (const char* field : {"token", "role", "user"}) {
    if (!item[field] || !item[field].IsScalar()) {
      return InvalidArgumentError(at + "." + field + " is missing");
    }
  }
  *token = item["token"].Scalar();
  const std::string role = item["role"].Scalar();
  const std::string user = item["user"].Scalar();
  if (token->size() < kMinTokenLength) {
    return InvalidArgumentError(at + ".token is shorter than " + std::to_string(kMinTokenLength) +
                                " characters");
  }
  if (!std::all_of(token->begin(), token->end(), IsTokenChar)) {
    return InvalidArgumentError(at + ".token has a character outside [A-Za-z0-9._~+/=-]");
  }
  const auto named = std::find_if(kRoleNames.begin(), kRoleNames.end(),
                                  [&](const auto& entry) { return entry.second == role; });
  if (named == kRoleNames.end()) {
    return InvalidArgumentError(at + ".role is `" + role + "`, expected admin or user");
  }
  if (named->first == Role::kWorker) {
    return InvalidArgumentError(at + ".role: worker tokens are minted per job, not listed here");
  }
  Principal principal;
  principal.role = named->first;
  if (user.empty() || user.size() > 64) {
    return InvalidArgumentError(at + ".user must have 1 to 64 characters");
  }
  if (!std::all_of(user.begin(), user.end(), IsUserChar)) {
    return InvalidArgumentError(at + ".user has a character outside [A-Za-z0-9._@-]");
  }
  principal.user = user;
  return principal;
}

}  // namespace

Status Authenticator::LoadTokensFile(const std::string& path) {
  const StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status().WithContext("tokens file");
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    FB_LOG(WARNING) << "tokens file " << path << " is readable by group or others; chmod 600 it";
  }
  return LoadTokensYaml(*text, path);
}

Status Authenticator::LoadTokensYaml(std::string_view yaml, std::string_view source) {
  const std::string where = "tokens file " + std::string(source);
  FB_ASSIGN_OR_RETURN(const YAML::Node root, ParseYaml(yaml, where));
  if (!root.IsMap()) return InvalidArgumentError(where + ": expected a mapping with `tokens`");
  FB_RETURN_IF_ERROR(CheckKeys(root, {"version", "tokens"}, where));
  FB_RETURN_IF_ERROR(CheckVersion(root, where));
  const YAML::Node tokens = root["tokens"];
  if (!tokens || !(tokens.IsSequence() || tokens.IsNull())) {
    return InvalidArgumentError(where + ": `tokens` must be a list");
  }
  Table table;
  for (size_t i = 0; tokens.IsSequence() && i < tokens.size(); ++i) {
    const std::string at = where + ": tokens[" + std::to_string(i) + "]";
    std::string token;
    FB_ASSIGN_OR_RETURN(const Principal principal, ReadTokenEntry(tokens[i], at, &token));
    const Entry entry{principal, Sha256(token)};
    if (!table.emplace(entry.digest, entry).second) {
      return InvalidArgumentError(at + ".token repeats an earlier entry's token");
    }
  }

  std::unique_lock lock(mu_);
  for (const auto& [digest, entry] : table) {
    if (worker_.count(digest) != 0) {
      return InvalidArgumentError(where + ": a listed token is a minted worker token");
    }
  }
  static_ = std::move(table);
  return OkStatus();
}

StatusOr<std::string> Authenticator::MintWorkerToken(std::string_view job_id) {
  if (job_id.empty()) return InvalidArgumentError("MintWorkerToken: job id is empty");
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    return InternalError("MintWorkerToken: the OpenSSL CSPRNG failed");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  token.reserve(64);
  for (unsigned char b : bytes) {
    token.push_back(kHex[b >> 4]);
    token.push_back(kHex[b & 15]);
  }
  OPENSSL_cleanse(bytes, sizeof(bytes));
  FB_RETURN_IF_ERROR(RegisterWorkerToken(job_id, token));
  return token;
}

Status Authenticator::RegisterWorkerToken(std::string_view job_id, std::string_view token) {
  if (!IsWorkerToken(token)) {
    return InvalidArgumentError(
        "RegisterWorkerToken: a worker token is 64 lowercase hex digits (job " + Excerpt(job_id) +
        ")");
  }
  return RegisterWorkerTokenDigest(job_id, TokenDigestHex(token));
}

Status Authenticator::RegisterWorkerTokenDigest(std::string_view job_id,
                                                std::string_view digest_hex) {
  if (job_id.empty()) return InvalidArgumentError("RegisterWorkerToken: job id is empty");
  std::string digest;
  if (!IsWorkerToken(digest_hex) || !FromHex(digest_hex, &digest)) {
    return InvalidArgumentError(
        "RegisterWorkerToken: a token digest is 64 lowercase hex digits "
        "(job " +
        Excerpt(job_id) + ")");
  }
  Entry entry;
  entry.principal.role = Role::kWorker;
  entry.principal.job_id = std::string(job_id);
  entry.digest = std::move(digest);
  std::unique_lock lock(mu_);
  if (static_.count(entry.digest) != 0) {
    return AlreadyExistsError("RegisterWorkerToken: the token is an admin/user token");
  }
  auto [it, inserted] = worker_.emplace(entry.digest, entry);
  if (!inserted && it->second.principal.job_id != job_id) {
    return AlreadyExistsError("RegisterWorkerToken: the token belongs to another job");
  }
  return OkStatus();
}

int Authenticator::RevokeWorkerTokens(std::string_view job_id) {
  std::unique_lock lock(mu_);
  return static_cast<int>(
      std::erase_if(worker_, [&](const auto& kv) { return kv.second.principal.job_id == job_id; }));
}

StatusOr<Principal> Authenticator::Authenticate(std::string_view header) const {
  if (header.empty()) {
    missing_.fetch_add(1, std::memory_order_relaxed);
    return Unauthenticated("missing authorization: send `authorization: Bearer <token>`");
  }
  const size_t space = header.find(' ');
  std::string_view token;
  bool well_formed =
      space != std::string_view::npos && EqualsIgnoreCase(header.substr(0, space), "bearer");
  if (well_formed) {
    token = header.substr(space + 1);
    while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
    well_formed = !token.empty();
    for (char c : token) well_formed = well_formed && IsTokenChar(c);
  }
  if (!well_formed) {
    malformed_.fetch_add(1, std::memory_order_relaxed);
    return Unauthenticated("malformed authorization: expected `Bearer <token>`");
  }
  const std::string digest = Sha256(token);
  std::shared_lock lock(mu_);
  for (const Table* table : {&static_, &worker_}) {
    auto it = table->find(digest);
    // See Note [Token comparison].
    if (it != table->end() &&
        CRYPTO_memcmp(it->second.digest.data(), digest.data(), digest.size()) == 0) {
      ok_.fetch_add(1, std::memory_order_relaxed);
      return it->second.principal;
    }
  }
  unknown_.fetch_add(1, std::memory_order_relaxed);
  return Unauthenticated("unknown bearer token");
}

size_t Authenticator::static_token_count() const {
  std::shared_lock lock(mu_);
  return static_.size();
}

size_t Authenticator::worker_token_count() const {
  std::shared_lock lock(mu_);
  return worker_.size();
}

void Authenticator::RenderMetrics(PrometheusWriter& writer) const {
  writer.Family("fullband_auth_requests_total", MetricType::kCounter,
                "Authentication attempts by result.");
  writer.Sample({{"result", "ok"}}, static_cast<double>(ok_.load()));
  writer.Sample({{"result", "missing"}}, static_cast<double>(missing_.load()));
  writer.Sample({{"result", "malformed"}}, static_cast<double>(malformed_.load()));
  writer.Sample({{"result", "unknown"}}, static_cast<double>(unknown_.load()));
  writer.Family("fullband_auth_tokens", MetricType::kGauge,
                "Known bearer tokens: static (tokens file) and worker (minted per job).");
  writer.Sample({{"kind", "static"}}, static_cast<double>(static_token_count()));
  writer.Sample({{"kind", "worker"}}, static_cast<double>(worker_token_count()));
}

Status CheckJobService(const Principal& principal) {
  if (principal.role == Role::kWorker) {
    return PermissionDenied("a worker token may call only the worker service (job " +
                            principal.job_id + ")");
  }
  return OkStatus();
}

Status CheckJobOwner(const Principal& principal, std::string_view owner) {
  switch (principal.role) {
    case Role::kAdmin:
      return OkStatus();
    case Role::kUser:
      if (principal.user == owner) return OkStatus();
      return PermissionDenied("user " + principal.user + " may only see and cancel their own jobs");
    case Role::kWorker:
      return CheckJobService(principal);
  }
  return PermissionDenied("unknown role");
}

std::string TokenDigestHex(std::string_view token) {
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : Sha256(token)) {
    hex.push_back(kHex[c >> 4]);
    hex.push_back(kHex[c & 15]);
  }
  return hex;
}

Status CheckWorkerService(const Principal& principal, std::string_view job_id) {
  if (principal.role != Role::kWorker) {
    return PermissionDenied("the worker service takes only worker tokens, not a " +
                            std::string(RoleName(principal.role)) + " token");
  }
  if (principal.job_id != job_id) {
    return PermissionDenied("this worker token is for job " + principal.job_id + ", not job " +
                            Excerpt(job_id));
  }
  return OkStatus();
}

}  // namespace fullband::coordinator
