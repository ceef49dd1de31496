// PrometheusWriter (the text exposition format 0.0.4) and MetricsHttpServer, the HTTP/1.1
// server behind the coordinator's `/metrics` port (docs/DESIGN.md §7; names in
// docs/COORDINATOR.md), built on cpp-httplib. A writer is a plain value for one thread; a bad
// metric or label name is a programmer error (FB_CHECK). The server answers on a pool of
// threads and calls `render` there, one call at a time, so `render` must be safe to call from a
// thread other than the one that started the server.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"

namespace httplib {
class Server;
}

namespace fullband::coordinator {

enum class MetricType { kCounter, kGauge };

// Builds exposition text:
//
//   PrometheusWriter w;
//   w.Family("fullband_job_tokens_total", MetricType::kCounter, "Tokens counted.");
//   w.Sample({{"job", id}}, tokens);
//   std::string text = w.Take();
//
// Label values are escaped (\\, \", \n), HELP text too (\\, \n); NaN and ±Inf are written
// as NaN, +Inf, -Inf; integral values below 2^53 without an exponent. Counter names end in
// `_total` (FB_CHECK), as promtool expects.
class PrometheusWriter {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // Starts a family: its # HELP and # TYPE lines. Each name once per exposition.
  void Family(std::string_view name, MetricType type, std::string_view help);
  // One sample of the current family. Label names match [a-zA-Z_][a-zA-Z0-9_]*.
  void Sample(const Labels& labels, double value);
  void Sample(double value) { Sample({}, value); }

  const std::string& text() const { return text_; }
  std::string Take() { return std::move(text_); }

 private:
  std::string text_;
  std::string family_;
  std::set<std::string, std::less<>> families_;
};

// Label value and HELP escaping, and value formatting, as PrometheusWriter does them.
std::string EscapeLabelValue(std::string_view value);
std::string FormatMetricValue(double value);

// process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_start_time_seconds and process_threads of this process, from
// /proc (the names Prometheus client libraries use). Nothing is written where /proc is absent.
void WriteProcessMetrics(PrometheusWriter& writer);

// GET (or HEAD) /metrics → 200 with `render()` as text/plain; version=0.0.4, compressed when
// the client asks for gzip or br; any other path → 404; GET and HEAD are the only methods
// allowed: another one the library knows (POST, PUT, DELETE, OPTIONS, PATCH, CONNECT, TRACE)
// → 405, an unknown one → 400; a request line that is not `METHOD /path HTTP/1.0|1.1` ending
// in CRLF → 400 (header lines without a colon, and runs of spaces in the request line, are
// let through); a request line over kMaxLineBytes → 414, a header line over it → 400; a
// client that sends nothing is dropped after the read timeout rounded up to whole seconds, one
// that stops in the middle of a request after the read timeout. Every response closes the
// connection. A silent client holds one of kThreads threads, not the whole server.
//
// Start ignores SIGPIPE in the whole process (the library does, so that a client that goes
// away cannot kill it; the local launcher restores it for its children).
class MetricsHttpServer {
 public:
  // The library's limit on a request or header line, CRLF included (CPPHTTPLIB_REQUEST_URI_
  // MAX_LENGTH and CPPHTTPLIB_HEADER_MAX_LENGTH, fixed when libcpp-httplib was built).
  static constexpr size_t kMaxLineBytes = 8192;
  // Connections served at once; more wait for a free thread.
  static constexpr int kThreads = 4;

  // Nothing happens until Start. `host` is a numeric address or a name ("127.0.0.1",
  // "::1", "localhost", "0.0.0.0" for every interface); port 0 picks a free port.
  MetricsHttpServer(std::string host, int port, std::function<std::string()> render);
  ~MetricsHttpServer();  // Stop()
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Binds, listens and starts serving. Errors: INVALID_ARGUMENT (port outside 0..65535, a host
  // that does not resolve), UNAVAILABLE (cannot bind, e.g. the port is in use),
  // FAILED_PRECONDITION (already started).
  Status Start();
  // Stops accepting and joins the threads. The library cannot interrupt a connection in
  // progress, so Stop waits for it: a client that stalls is dropped after the read timeout.
  // Idempotent.
  void Stop();

  // The bound port (the chosen one for port 0); 0 before Start.
  int port() const { return bound_port_; }
  // Read (and write) timeout of a connection; set before Start.
  void set_read_timeout_ms(int ms) { read_timeout_ms_ = ms; }

  // Requests answered, by status code: fullband_metrics_http_requests_total{code}.
  void RenderMetrics(PrometheusWriter& writer) const;

 private:
  std::unique_ptr<httplib::Server> MakeServer();
  void CountResponse(int code);

  std::string host_;
  int port_;
  std::function<std::string()> render_;
  int read_timeout_ms_ = 5000;
  int bound_port_ = 0;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;                        // runs the library's accept loop
  std::atomic<bool> listen_returned_{false};  // set by thread_ when the accept loop ends
  std::mutex render_mu_;                      // one render_ call at a time
  mutable std::mutex responses_mu_;
  std::map<int, uint64_t> responses_;  // by status code; guarded by responses_mu_
};

}  // namespace fullband::coordinator
