// Tests of coordinator/auth.h: the tokens file, worker tokens, Authenticate and the checks.
#include "coordinator/auth.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

#include "coordinator/metrics_http.h"

namespace fullband::coordinator {
namespace {

const std::string kAdminToken(40, 'a');
const std::string kBobToken = "bob-" + std::string(40, 'b');
const std::string kCarolToken = "carol." + std::string(40, 'c');

std::string TokensYaml() {
  return "version: 1\n"
         "tokens:\n"
         "  - {token: " +
         kAdminToken +
         ", role: admin, user: alice}\n"
         "  - token: " +
         kBobToken +
         "\n"
         "    role: user\n"
         "    user: bob\n"
         "  - {token: " +
         kCarolToken + ", role: user, user: carol@example.org}\n";
}

Authenticator& Loaded() {
  static Authenticator* auth = [] {
    auto* a = new Authenticator;
    Status s = a->LoadTokensYaml(TokensYaml(), "test");
    EXPECT_TRUE(s.ok()) << s.ToString();
    return a;
  }();
  return *auth;
}

// Loads `yaml` into a fresh Authenticator and returns the status.
Status Load(const std::string& yaml) {
  Authenticator auth;
  return auth.LoadTokensYaml(yaml, "t.yaml");
}

TEST(Auth, Authenticate_AdminToken_IsAdminPrincipal) {
  auto p = Loaded().Authenticate("Bearer " + kAdminToken);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->role, Role::kAdmin);
  EXPECT_EQ(p->user, "alice");
  EXPECT_EQ(p->job_id, "");
}

TEST(Auth, Authenticate_UserToken_IsUserPrincipal) {
  auto p = Loaded().Authenticate("Bearer " + kBobToken);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->role, Role::kUser);
  EXPECT_EQ(p->user, "bob");
  auto c = Loaded().Authenticate("Bearer " + kCarolToken);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->user, "carol@example.org");
}

TEST(Auth, Authenticate_SchemeIsCaseInsensitive) {
  EXPECT_TRUE(Loaded().Authenticate("bearer " + kBobToken).ok());
  EXPECT_TRUE(Loaded().Authenticate("BEARER  " + kBobToken).ok());
}

TEST(Auth, Authenticate_MissingHeader_IsUnauthenticated) {
  auto p = Loaded().Authenticate("");
  EXPECT_EQ(p.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(p.status().message().find("missing"), std::string::npos);
}

TEST(Auth, Authenticate_MalformedHeader_IsUnauthenticated) {
  for (const std::string& header : std::vector<std::string>{
           kBobToken, "Basic " + kBobToken, "Bearer", "Bearer ", "Bearer " + kBobToken + " x",
           "Bearer " + kBobToken + "\n", "Token " + kBobToken}) {
    auto p = Loaded().Authenticate(header);
    EXPECT_EQ(p.status().code(), StatusCode::kUnauthenticated) << header;
    EXPECT_NE(p.status().message().find("malformed"), std::string::npos) << header;
    EXPECT_EQ(p.status().message().find(kBobToken), std::string::npos) << header;
  }
}

TEST(Auth, Authenticate_UnknownToken_IsUnauthenticated) {
  const std::string guess = kBobToken.substr(0, kBobToken.size() - 1) + "x";
  auto p = Loaded().Authenticate("Bearer " + guess);
  EXPECT_EQ(p.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(p.status().message().find("unknown"), std::string::npos);
  EXPECT_EQ(p.status().message().find(guess), std::string::npos);
  // A prefix or extension of a real token is not that token.
  EXPECT_FALSE(Loaded().Authenticate("Bearer " + kBobToken + "b").ok());
  EXPECT_FALSE(Loaded().Authenticate("Bearer " + kBobToken.substr(1)).ok());
}

TEST(Auth, Authenticate_NoTokensLoaded_IsUnauthenticated) {
  Authenticator empty;
  EXPECT_EQ(empty.Authenticate("Bearer " + kAdminToken).status().code(),
            StatusCode::kUnauthenticated);
}

TEST(Auth, MintWorkerToken_IsRandomHexAndAuthenticatesAsWorkerOfItsJob) {
  Authenticator auth;
  std::set<std::string> seen;
  for (int i = 0; i < 50; ++i) {
    auto token = auth.MintWorkerToken("job-7");
    ASSERT_TRUE(token.ok()) << token.status().ToString();
    ASSERT_EQ(token->size(), 64u);
    EXPECT_EQ(token->find_first_not_of("0123456789abcdef"), std::string::npos);
    EXPECT_TRUE(seen.insert(*token).second);
  }
  EXPECT_EQ(auth.worker_token_count(), 50u);
  auto p = auth.Authenticate("Bearer " + *seen.begin());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->role, Role::kWorker);
  EXPECT_EQ(p->job_id, "job-7");
  EXPECT_EQ(p->user, "");
}

TEST(Auth, MintWorkerToken_EmptyJob_IsInvalidArgument) {
  Authenticator auth;
  EXPECT_EQ(auth.MintWorkerToken("").status().code(), StatusCode::kInvalidArgument);
}

TEST(Auth, RegisterWorkerToken_AfterRestart_AuthenticatesAgain) {
  std::string token;
  {
    Authenticator before;
    auto minted = before.MintWorkerToken("job-1");
    ASSERT_TRUE(minted.ok());
    token = *minted;
  }
  Authenticator after;
  EXPECT_EQ(after.Authenticate("Bearer " + token).status().code(), StatusCode::kUnauthenticated);
  ASSERT_TRUE(after.RegisterWorkerToken("job-1", token).ok());
  EXPECT_TRUE(after.RegisterWorkerToken("job-1", token).ok());  // idempotent
  auto p = after.Authenticate("Bearer " + token);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->job_id, "job-1");
}

TEST(Auth, RegisterWorkerToken_TokenOfAnotherJob_IsAlreadyExists) {
  Authenticator auth;
  auto token = auth.MintWorkerToken("job-1");
  ASSERT_TRUE(token.ok());
  Status s = auth.RegisterWorkerToken("job-2", *token);
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(s.message().find(*token), std::string::npos);
}

TEST(Auth, RegisterWorkerToken_BadShape_IsInvalidArgument) {
  Authenticator auth;
  const std::string upper(64, 'A');
  for (const std::string& token :
       std::vector<std::string>{std::string(63, 'a'), std::string(65, 'a'), upper, ""}) {
    Status s = auth.RegisterWorkerToken("job", token);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << token;
    if (!token.empty()) {
      EXPECT_EQ(s.message().find(token), std::string::npos);
    }
  }
  EXPECT_EQ(auth.RegisterWorkerToken("", std::string(64, 'a')).code(),
            StatusCode::kInvalidArgument);
}

TEST(Auth, RegisterWorkerToken_StaticToken_IsAlreadyExists) {
  Authenticator auth;
  const std::string hex(64, 'e');
  ASSERT_TRUE(auth.LoadTokensYaml(
                      "version: 1\ntokens:\n  - {token: " + hex + ", role: user, user: u}\n", "t")
                  .ok());
  EXPECT_EQ(auth.RegisterWorkerToken("job", hex).code(), StatusCode::kAlreadyExists);
}

TEST(Auth, RegisterWorkerTokenDigest_ReadmitsTheTokenByItsDigest) {
  Authenticator minted, restored;
  const std::string token = *minted.MintWorkerToken("job-1");
  const std::string digest = TokenDigestHex(token);
  EXPECT_EQ(digest.size(), 64u);
  EXPECT_NE(digest, token);
  ASSERT_TRUE(restored.RegisterWorkerTokenDigest("job-1", digest).ok());
  StatusOr<Principal> p = restored.Authenticate("Bearer " + token);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->role, Role::kWorker);
  EXPECT_EQ(p->job_id, "job-1");
  EXPECT_EQ(restored.Authenticate("Bearer " + digest).status().code(),
            StatusCode::kUnauthenticated);  // the digest is no credential
  EXPECT_EQ(restored.RegisterWorkerTokenDigest("job-1", "xyz").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(restored.RegisterWorkerTokenDigest("job-2", digest).code(), StatusCode::kAlreadyExists);
}

TEST(Auth, RevokeWorkerTokens_ForgetsOnlyThatJob) {
  Authenticator auth;
  auto a1 = auth.MintWorkerToken("a");
  auto a2 = auth.MintWorkerToken("a");
  auto b = auth.MintWorkerToken("b");
  ASSERT_TRUE(a1.ok() && a2.ok() && b.ok());
  EXPECT_EQ(auth.RevokeWorkerTokens("a"), 2);
  EXPECT_EQ(auth.RevokeWorkerTokens("a"), 0);
  EXPECT_FALSE(auth.Authenticate("Bearer " + *a1).ok());
  EXPECT_FALSE(auth.Authenticate("Bearer " + *a2).ok());
  EXPECT_TRUE(auth.Authenticate("Bearer " + *b).ok());
}

TEST(Auth, LoadTokensYaml_Reload_ReplacesStaticTokensAndKeepsWorkerTokens) {
  Authenticator auth;
  ASSERT_TRUE(auth.LoadTokensYaml(TokensYaml(), "t").ok());
  auto worker = auth.MintWorkerToken("j");
  ASSERT_TRUE(worker.ok());
  const std::string fresh(48, 'f');
  ASSERT_TRUE(
      auth.LoadTokensYaml(
              "version: 1\ntokens:\n  - {token: " + fresh + ", role: user, user: bob}\n", "t")
          .ok());
  EXPECT_FALSE(auth.Authenticate("Bearer " + kBobToken).ok());
  EXPECT_TRUE(auth.Authenticate("Bearer " + fresh).ok());
  EXPECT_TRUE(auth.Authenticate("Bearer " + *worker).ok());
  EXPECT_EQ(auth.static_token_count(), 1u);
}

TEST(Auth, LoadTokensYaml_EmptyList_IsOk) {
  EXPECT_TRUE(Load("version: 1\ntokens: []\n").ok());
  EXPECT_TRUE(Load("version: 1\ntokens:\n").ok());
}

TEST(Auth, LoadTokensYaml_BadFile_IsInvalidArgumentNamingTheField) {
  const std::string t(40, 't');
  struct Case {
    std::string yaml;
    std::string expect;  // a substring of the message
  };
  const Case cases[] = {
      {"tokens: [", "not valid YAML"},
      {"- a\n- b\n", "expected a mapping"},
      {"tokens: []\n", "`version` is missing"},
      {"version: 2\ntokens: []\n", "`version` is 2"},
      {"version: 1\ntoken: []\n", "unknown key `token`"},
      {"version: 1\ntokens: {a: 1}\n", "`tokens` must be a list"},
      {"version: 1\ntokens: [x]\n", "tokens[0] must be a mapping"},
      {"version: 1\ntokens:\n  - {role: user, user: u}\n", "tokens[0].token is missing"},
      {"version: 1\ntokens:\n  - {token: " + t + ", user: u}\n", "tokens[0].role is missing"},
      {"version: 1\ntokens:\n  - {token: " + t + ", role: user}\n", "tokens[0].user is missing"},
      {"version: 1\ntokens:\n  - {token: " + t + ", role: user, user: u, rol: x}\n",
       "tokens[0]: unknown key `rol`"},
      {"version: 1\ntokens:\n  - {token: short, role: user, user: u}\n",
       "tokens[0].token is shorter than 32"},
      {"version: 1\ntokens:\n  - {token: \"" + t + "!\", role: user, user: u}\n",
       "tokens[0].token has a character"},
      {"version: 1\ntokens:\n  - {token: " + t + ", role: root, user: u}\n",
       "tokens[0].role is `root`"},
      {"version: 1\ntokens:\n  - {token: " + t + ", role: worker, user: u}\n",
       "tokens[0].role: worker tokens are minted"},
      {"version: 1\ntokens:\n  - {token: " + t + ", role: user, user: \"\"}\n",
       "tokens[0].user must have 1 to 64"},
      {"version: 1\ntokens:\n  - {token: " + t + ", role: user, user: a b}\n",
       "tokens[0].user has a character"},
      {"version: 1\ntokens:\n  - {token: " + t + ", role: user, user: u}\n  - {token: " + t +
           ", role: admin, user: v}\n",
       "tokens[1].token repeats"},
  };
  for (const Case& c : cases) {
    Status s = Load(c.yaml);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.yaml;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("t.yaml"), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find(t), std::string::npos) << "echoes a token: " << s.message();
  }
}

TEST(Auth, LoadTokensYaml_Error_KeepsThePreviousTokens) {
  Authenticator auth;
  ASSERT_TRUE(auth.LoadTokensYaml(TokensYaml(), "t").ok());
  EXPECT_FALSE(auth.LoadTokensYaml("version: 1\ntokens: [x]\n", "t").ok());
  EXPECT_TRUE(auth.Authenticate("Bearer " + kBobToken).ok());
}

TEST(Auth, LoadTokensYaml_MintedWorkerToken_IsInvalidArgument) {
  Authenticator auth;
  auto worker = auth.MintWorkerToken("j");
  ASSERT_TRUE(worker.ok());
  Status s = auth.LoadTokensYaml(
      "version: 1\ntokens:\n  - {token: " + *worker + ", role: admin, user: a}\n", "t");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().find(*worker), std::string::npos);
}

TEST(Auth, LoadTokensFile_ReadsTheFile) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("fb_tokens_" + std::to_string(getpid()))).string();
  {
    std::ofstream out(path);
    out << TokensYaml();
  }
  Authenticator auth;
  Status s = auth.LoadTokensFile(path);
  std::remove(path.c_str());
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(auth.static_token_count(), 3u);
}

TEST(Auth, LoadTokensFile_Missing_IsNotFoundNamingThePath) {
  Authenticator auth;
  Status s = auth.LoadTokensFile("/nonexistent/fullband/tokens.yaml");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("/nonexistent/fullband/tokens.yaml"), std::string::npos);
}

TEST(Auth, CheckJobService_AdminAndUser_AreAllowed) {
  EXPECT_TRUE(CheckJobService({Role::kAdmin, "alice", ""}).ok());
  EXPECT_TRUE(CheckJobService({Role::kUser, "bob", ""}).ok());
}

TEST(Auth, CheckJobService_Worker_IsPermissionDenied) {
  EXPECT_EQ(CheckJobService({Role::kWorker, "", "j"}).code(), StatusCode::kPermissionDenied);
}

TEST(Auth, CheckJobOwner_AdminSeesEveryJob) {
  EXPECT_TRUE(CheckJobOwner({Role::kAdmin, "alice", ""}, "bob").ok());
}

TEST(Auth, CheckJobOwner_UserSeesOwnJobOnly) {
  EXPECT_TRUE(CheckJobOwner({Role::kUser, "bob", ""}, "bob").ok());
  Status s = CheckJobOwner({Role::kUser, "bob", ""}, "carol");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("own jobs"), std::string::npos);
}

TEST(Auth, CheckJobOwner_Worker_IsPermissionDenied) {
  EXPECT_EQ(CheckJobOwner({Role::kWorker, "", "j"}, "").code(), StatusCode::kPermissionDenied);
}

TEST(Auth, CheckWorkerService_WorkerOfThatJob_IsAllowed) {
  EXPECT_TRUE(CheckWorkerService({Role::kWorker, "", "j1"}, "j1").ok());
}

TEST(Auth, CheckWorkerService_WorkerOfAnotherJob_IsPermissionDenied) {
  Status s = CheckWorkerService({Role::kWorker, "", "j1"}, "j2");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("j1"), std::string::npos);
}

TEST(Auth, CheckWorkerService_AdminOrUser_IsPermissionDenied) {
  EXPECT_EQ(CheckWorkerService({Role::kAdmin, "alice", ""}, "j").code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckWorkerService({Role::kUser, "bob", ""}, "j").code(),
            StatusCode::kPermissionDenied);
}

TEST(Auth, Authenticate_WhileMintingRevokingAndReloading_StaysConsistent) {
  Authenticator auth;
  ASSERT_TRUE(auth.LoadTokensYaml(TokensYaml(), "t").ok());
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        auto p = auth.Authenticate("Bearer " + kBobToken);
        if (!p.ok() || p->user != "bob") ++wrong;
        if (auth.Authenticate("Bearer " + std::string(64, '0')).ok()) ++wrong;
      }
    });
  }
  for (int i = 0; i < 200; ++i) {
    const std::string job = "job-" + std::to_string(i % 7);
    // No ASSERT here: the readers must be joined below whatever happens.
    auto token = auth.MintWorkerToken(job);
    auto p = token.ok() ? auth.Authenticate("Bearer " + *token) : token.status();
    EXPECT_TRUE(p.ok() && p->job_id == job) << job;
    if (i % 10 == 0) auth.RevokeWorkerTokens(job);
    if (i % 50 == 0) {
      EXPECT_TRUE(auth.LoadTokensYaml(TokensYaml(), "t").ok());
    }
  }
  stop = true;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(Auth, RenderMetrics_CountsResults) {
  Authenticator auth;
  ASSERT_TRUE(auth.LoadTokensYaml(TokensYaml(), "t").ok());
  EXPECT_TRUE(auth.Authenticate("Bearer " + kBobToken).ok());
  EXPECT_FALSE(auth.Authenticate("").ok());
  EXPECT_FALSE(auth.Authenticate("Basic x").ok());
  EXPECT_FALSE(auth.Authenticate("Bearer nope").ok());
  EXPECT_FALSE(auth.Authenticate("Bearer nope2").ok());
  PrometheusWriter w;
  auth.RenderMetrics(w);
  const std::string& text = w.text();
  EXPECT_NE(text.find("fullband_auth_requests_total{result=\"ok\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("fullband_auth_requests_total{result=\"missing\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("fullband_auth_requests_total{result=\"malformed\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("fullband_auth_requests_total{result=\"unknown\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("fullband_auth_tokens{kind=\"static\"} 3\n"), std::string::npos);
}

}  // namespace
}  // namespace fullband::coordinator
