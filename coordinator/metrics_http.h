// PrometheusWriter (the text exposition format 0.0.4) and MetricsHttpServer, the small HTTP/1.1
// server behind the coordinator's `/metrics` port (docs/DESIGN.md §7; names in
// docs/COORDINATOR.md). A writer is a plain value for one thread; a bad metric or label name is a
// programmer error (FB_CHECK). The server answers one connection at a time on its own thread and
// calls `render` there, so `render` must be safe to call from that thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"

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

// GET (or HEAD) /metrics → 200 with `render()` as text/plain; version=0.0.4; any other path
// → 404; a method other than GET/HEAD → 405; an unparsable request → 400; a request head over
// kMaxRequestBytes → 431; a client that sends no complete head within the read timeout is
// dropped. Every response closes the connection.
class MetricsHttpServer {
 public:
  static constexpr size_t kMaxRequestBytes = 8192;

  // Nothing happens until Start. `host` is a numeric address or a name ("127.0.0.1",
  // "::1", "localhost", "0.0.0.0" for every interface); port 0 picks a free port.
  MetricsHttpServer(std::string host, int port, std::function<std::string()> render);
  ~MetricsHttpServer();  // Stop()
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Binds, listens and starts the serving thread. Errors: INVALID_ARGUMENT (port outside
  // 0..65535, a host that does not resolve), UNAVAILABLE (cannot bind, e.g. the port is in
  // use), FAILED_PRECONDITION (already started), INTERNAL (other socket errors).
  Status Start();
  // Stops accepting, drops a connection in progress and joins the thread. Idempotent.
  void Stop();

  // The bound port (the chosen one for port 0); 0 before Start.
  int port() const { return bound_port_; }
  // Read timeout for one request head; set before Start.
  void set_read_timeout_ms(int ms) { read_timeout_ms_ = ms; }

  // Requests answered, by status code: fullband_metrics_http_requests_total{code}.
  void RenderMetrics(PrometheusWriter& writer) const;

 private:
  void Serve();
  void HandleConnection(int fd);

  std::string host_;
  int port_;
  std::function<std::string()> render_;
  int read_timeout_ms_ = 5000;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: Stop() wakes the serving thread's poll
  int bound_port_ = 0;
  std::thread thread_;
  std::atomic<uint64_t> responses_200_{0}, responses_400_{0}, responses_404_{0}, responses_405_{0},
      responses_431_{0};
};

}  // namespace fullband::coordinator
