// Tests of coordinator/metrics_http.h: exposition text, value and label escaping, and the HTTP
// server over real loopback sockets; promtool validates what the server serves.
#include "coordinator/metrics_http.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>
#include <vector>

#include "coordinator/auth.h"

namespace fullband::coordinator {
namespace {

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

std::string ReadAll(int fd) {
  std::string out;
  char buffer[4096];
  while (true) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

// Sends `request` on a fresh connection and returns everything the server answers.
std::string Exchange(int port, const std::string& request) {
  const int fd = Connect(port);
  EXPECT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::string response = ReadAll(fd);
  close(fd);
  return response;
}

std::string Body(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

TEST(PrometheusWriter, FormatMetricValue_SpecialAndIntegralValues) {
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatMetricValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatMetricValue(0.0), "0");
  EXPECT_EQ(FormatMetricValue(-3.0), "-3");
  EXPECT_EQ(FormatMetricValue(123456789012.0), "123456789012");
  EXPECT_EQ(FormatMetricValue(0.25), "0.25");
  EXPECT_EQ(FormatMetricValue(1e300), "1e+300");
  EXPECT_EQ(FormatMetricValue(9007199254740992.0), "9007199254740992");  // to_chars, not int
  EXPECT_EQ(FormatMetricValue(1e18), "1e+18");
  EXPECT_EQ(std::stod(FormatMetricValue(0.1)), 0.1);  // round-trips
}

TEST(PrometheusWriter, EscapeLabelValue_BackslashQuoteNewline) {
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(EscapeLabelValue("plain ünïcode"), "plain ünïcode");
}

TEST(PrometheusWriter, Text_HasHelpTypeAndSamples) {
  PrometheusWriter w;
  w.Family("fullband_x_total", MetricType::kCounter, "Line one\nand a \\ backslash.");
  w.Sample({{"job", "j\"1"}, {"passes", "2"}}, 7);
  w.Sample({{"job", "j2"}, {"passes", "3"}}, 0.5);
  w.Family("fullband_y", MetricType::kGauge, "A gauge.");
  w.Sample(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(w.text(),
            "# HELP fullband_x_total Line one\\nand a \\\\ backslash.\n"
            "# TYPE fullband_x_total counter\n"
            "fullband_x_total{job=\"j\\\"1\",passes=\"2\"} 7\n"
            "fullband_x_total{job=\"j2\",passes=\"3\"} 0.5\n"
            "# HELP fullband_y A gauge.\n"
            "# TYPE fullband_y gauge\n"
            "fullband_y NaN\n");
}

TEST(PrometheusWriterDeathTest, CounterWithoutTotalSuffix_Aborts) {
  PrometheusWriter w;
  EXPECT_DEATH(w.Family("fullband_x", MetricType::kCounter, "h"), "_total");
}

TEST(PrometheusWriterDeathTest, BadLabelName_Aborts) {
  PrometheusWriter w;
  w.Family("g", MetricType::kGauge, "h");
  EXPECT_DEATH(w.Sample({{"bad-name", "v"}}, 1), "bad label name");
}

TEST(PrometheusWriterDeathTest, SameFamilyTwice_Aborts) {
  PrometheusWriter w;
  w.Family("g", MetricType::kGauge, "h");
  EXPECT_DEATH(w.Family("g", MetricType::kGauge, "h"), "written twice");
}

TEST(PrometheusWriter, WriteProcessMetrics_HasPlausibleValues) {
  PrometheusWriter w;
  WriteProcessMetrics(w);
  const std::string& t = w.text();
  for (const char* name : {"process_cpu_seconds_total ", "process_resident_memory_bytes ",
                           "process_virtual_memory_bytes ", "process_open_fds ",
                           "process_start_time_seconds ", "process_threads "}) {
    EXPECT_NE(t.find(std::string("\n") + name), std::string::npos) << name;
  }
  const size_t at = t.find("\nprocess_start_time_seconds ");
  const double start = std::stod(t.substr(at + 28));
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(start, now + 2);
  EXPECT_GE(start, now - 24 * 3600.0);
}

class MetricsHttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<MetricsHttpServer>("127.0.0.1", 0, [this] { return body_; });
    ASSERT_TRUE(server_->Start().ok());
    ASSERT_GT(server_->port(), 0);
  }
  std::string body_ = "# HELP up Up.\n# TYPE up gauge\nup 1\n";
  std::unique_ptr<MetricsHttpServer> server_;
};

TEST_F(MetricsHttpServerTest, GetMetrics_Is200WithTheRenderedText) {
  const std::string r =
      Exchange(server_->port(), "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
            std::string::npos);
  EXPECT_NE(r.find("Content-Length: " + std::to_string(body_.size()) + "\r\n"), std::string::npos);
  EXPECT_EQ(Body(r), body_);
}

TEST_F(MetricsHttpServerTest, GetMetricsWithQueryOrHttp10_Is200) {
  EXPECT_EQ(Exchange(server_->port(), "GET /metrics?x=1 HTTP/1.0\r\n\r\n").rfind("HTTP/1.1 200", 0),
            0u);
}

TEST_F(MetricsHttpServerTest, GetMetricsAcceptingGzip_IsCompressed) {
  const std::string r =
      Exchange(server_->port(), "GET /metrics HTTP/1.1\r\nAccept-Encoding: gzip\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Content-Encoding: gzip\r\n"), std::string::npos) << r;
}

TEST_F(MetricsHttpServerTest, HeadMetrics_Is200WithoutBody) {
  const std::string r = Exchange(server_->port(), "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
  EXPECT_EQ(Body(r), "");
}

TEST_F(MetricsHttpServerTest, OtherPath_Is404) {
  EXPECT_EQ(Exchange(server_->port(), "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(Exchange(server_->port(), "GET /metricsx HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0),
            0u);
}

TEST_F(MetricsHttpServerTest, OtherMethods_Are405) {
  for (const char* method : {"POST", "PUT", "DELETE", "OPTIONS", "TRACE"}) {
    const std::string r =
        Exchange(server_->port(), std::string(method) + " /metrics HTTP/1.1\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 405", 0), 0u) << method;
    EXPECT_NE(r.find("Allow: GET, HEAD\r\n"), std::string::npos) << method;
  }
}

TEST_F(MetricsHttpServerTest, MalformedRequest_Is400) {
  for (const char* request :
       {"HELLO\r\n\r\n", "GET /metrics\r\n\r\n", "GET metrics HTTP/1.1\r\n\r\n",
        "GET /metrics HTTP/2.0\r\n\r\n", "get /metrics HTTP/1.1\r\n\r\n",
        "BREW /metrics HTTP/1.1\r\n\r\n", "GET /metrics HTTP/1.1\n\n"}) {
    EXPECT_EQ(Exchange(server_->port(), request).rfind("HTTP/1.1 400", 0), 0u) << request;
  }
}

// The library lets these through (metrics_http.h).
TEST_F(MetricsHttpServerTest, HeaderWithoutColonOrDoubleSpace_Is200) {
  for (const char* request :
       {"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n", "GET  /metrics HTTP/1.1\r\n\r\n"}) {
    EXPECT_EQ(Exchange(server_->port(), request).rfind("HTTP/1.1 200", 0), 0u) << request;
  }
}

TEST_F(MetricsHttpServerTest, OverlongLines_Are414Or400) {
  const size_t limit = MetricsHttpServer::kMaxLineBytes;
  // "GET /x...x HTTP/1.1\r\n" of exactly `size` bytes.
  auto request_line = [](size_t size) {
    return "GET /" + std::string(size - std::string("GET / HTTP/1.1\r\n").size(), 'x') +
           " HTTP/1.1\r\n";
  };
  EXPECT_EQ(Exchange(server_->port(), request_line(limit) + "\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(Exchange(server_->port(), request_line(limit + 1) + "\r\n").rfind("HTTP/1.1 414", 0),
            0u);
  // "X-Big: x...x\r\n" of exactly `size` bytes.
  auto header_line = [](size_t size) {
    return "X-Big: " + std::string(size - std::string("X-Big: \r\n").size(), 'x') + "\r\n";
  };
  const std::string get = "GET /metrics HTTP/1.1\r\n";
  EXPECT_EQ(Exchange(server_->port(), get + header_line(limit) + "\r\n").rfind("HTTP/1.1 200", 0),
            0u);
  EXPECT_EQ(
      Exchange(server_->port(), get + header_line(limit + 1) + "\r\n").rfind("HTTP/1.1 400", 0),
      0u);
}

TEST_F(MetricsHttpServerTest, ClientClosingEarly_DoesNotStopServing) {
  close(Connect(server_->port()));
  const int half = Connect(server_->port());
  ASSERT_EQ(send(half, "GET /met", 8, MSG_NOSIGNAL), 8);
  close(half);
  EXPECT_EQ(Exchange(server_->port(), "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0),
            0u);
}

TEST_F(MetricsHttpServerTest, RenderMetrics_CountsResponsesByCode) {
  Exchange(server_->port(), "GET /metrics HTTP/1.1\r\n\r\n");
  Exchange(server_->port(), "GET /nope HTTP/1.1\r\n\r\n");
  Exchange(server_->port(), "GET /nope HTTP/1.1\r\n\r\n");
  PrometheusWriter w;
  server_->RenderMetrics(w);
  EXPECT_NE(w.text().find("fullband_metrics_http_requests_total{code=\"200\"} 1\n"),
            std::string::npos);
  EXPECT_NE(w.text().find("fullband_metrics_http_requests_total{code=\"404\"} 2\n"),
            std::string::npos);
}

TEST(MetricsHttpServer, SilentClient_IsDroppedAfterTheReadTimeout) {
  MetricsHttpServer server("127.0.0.1", 0, [] { return std::string("up 1\n"); });
  server.set_read_timeout_ms(100);
  ASSERT_TRUE(server.Start().ok());
  const int silent = Connect(server.port());
  EXPECT_EQ(ReadAll(silent), "");  // closed by the server without an answer
  close(silent);
  EXPECT_EQ(Exchange(server.port(), "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
}

TEST(MetricsHttpServer, SilentClient_DoesNotDelayAnotherRequest) {
  MetricsHttpServer server("127.0.0.1", 0, [] { return std::string("up 1\n"); });
  server.set_read_timeout_ms(30'000);
  ASSERT_TRUE(server.Start().ok());
  const int silent = Connect(server.port());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Exchange(server.port(), "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  close(silent);  // else Stop waits for it
}

TEST(MetricsHttpServer, ConcurrentRequests_RenderOneAtATime) {
  std::atomic<int> rendering{0};
  std::atomic<bool> overlapped{false};
  MetricsHttpServer server("127.0.0.1", 0, [&] {
    if (++rendering > 1) overlapped = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    --rendering;
    return std::string("up 1\n");
  });
  ASSERT_TRUE(server.Start().ok());
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < MetricsHttpServer::kThreads; ++i) {
    clients.emplace_back([&] {
      ok += Exchange(server.port(), "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0) == 0;
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(ok, MetricsHttpServer::kThreads);
  EXPECT_FALSE(overlapped);
}

// The library cannot interrupt a connection in progress: Stop waits for it, at most the read
// timeout for a client that stalls.
TEST(MetricsHttpServer, Stop_WithAStalledClient_ReturnsAfterTheReadTimeout) {
  MetricsHttpServer server("127.0.0.1", 0, [] { return std::string(); });
  server.set_read_timeout_ms(1000);
  ASSERT_TRUE(server.Start().ok());
  const int silent = Connect(server.port());
  ASSERT_EQ(send(silent, "GET", 3, MSG_NOSIGNAL), 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a thread is reading it
  const auto start = std::chrono::steady_clock::now();
  server.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(ReadAll(silent), "");
  close(silent);
  server.Stop();  // idempotent
  EXPECT_EQ(server.port() > 0, true);
}

TEST(MetricsHttpServer, Start_Twice_IsFailedPrecondition) {
  MetricsHttpServer server("127.0.0.1", 0, [] { return std::string(); });
  ASSERT_TRUE(server.Start().ok());
  EXPECT_EQ(server.Start().code(), StatusCode::kFailedPrecondition);
}

TEST(MetricsHttpServer, Start_PortInUse_IsUnavailable) {
  MetricsHttpServer first("127.0.0.1", 0, [] { return std::string(); });
  ASSERT_TRUE(first.Start().ok());
  MetricsHttpServer second("127.0.0.1", first.port(), [] { return std::string(); });
  Status s = second.Start();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find(std::to_string(first.port())), std::string::npos);
}

TEST(MetricsHttpServer, Start_BadPortOrHost_IsInvalidArgument) {
  MetricsHttpServer port("127.0.0.1", 70000, [] { return std::string(); });
  EXPECT_EQ(port.Start().code(), StatusCode::kInvalidArgument);
  MetricsHttpServer host("no such host.invalid", 0, [] { return std::string(); });
  EXPECT_EQ(host.Start().code(), StatusCode::kInvalidArgument);
}

// Runs `promtool check metrics` on `text`; returns its exit status, or -1 without promtool.
int PromtoolCheck(const std::string& text) {
  if (std::system("command -v promtool > /dev/null 2>&1") != 0) return -1;
  const std::string path =
      (std::filesystem::temp_directory_path() / ("fb_metrics_" + std::to_string(getpid()) + ".txt"))
          .string();
  {
    std::ofstream out(path);
    out << text;
  }
  const int rc = std::system(("promtool check metrics < " + path).c_str());
  std::remove(path.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

TEST(MetricsHttpServer, ServedExposition_PassesPromtool) {
  if (PromtoolCheck("") < 0) GTEST_SKIP() << "promtool not installed (Debian: prometheus)";
  // The check can fail: promtool rejects a counter without the _total suffix.
  EXPECT_NE(PromtoolCheck("# HELP x X.\n# TYPE x counter\nx 1\n"), 0);

  Authenticator auth;
  ASSERT_TRUE(auth.MintWorkerToken("j").ok());
  MetricsHttpServer* self = nullptr;
  MetricsHttpServer server("127.0.0.1", 0, [&] {
    PrometheusWriter w;
    w.Family("fullband_test_loss", MetricType::kGauge, "Loss per pass \\ with\nnewline.");
    w.Sample({{"job", "a\"b\\c\nd"}, {"pass", "1"}}, 2.5);
    w.Sample({{"job", "a\"b\\c\nd"}, {"pass", "2"}}, std::nan(""));
    w.Sample({{"job", "x"}, {"pass", "1"}}, INFINITY);
    w.Sample({{"job", "x"}, {"pass", "2"}}, -INFINITY);
    w.Family("fullband_test_tokens_total", MetricType::kCounter, "Tokens.");
    w.Sample({{"job", "x"}}, 1e18);
    auth.RenderMetrics(w);
    self->RenderMetrics(w);
    WriteProcessMetrics(w);
    return w.Take();
  });
  self = &server;
  ASSERT_TRUE(server.Start().ok());
  const std::string body =
      Body(Exchange(server.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_NE(body.find("fullband_test_loss{job=\"a\\\"b\\\\c\\nd\",pass=\"2\"} NaN\n"),
            std::string::npos)
      << body;
  EXPECT_EQ(PromtoolCheck(body), 0) << body;
}

}  // namespace
}  // namespace fullband::coordinator
