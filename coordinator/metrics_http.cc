// PrometheusWriter, process metrics and MetricsHttpServer (metrics_http.h).
#include "coordinator/metrics_http.h"

#include <dirent.h>
#include <httplib.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

#include "common/logging.h"

namespace fullband::coordinator {
namespace {

bool IsMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool IsLabelName(std::string_view name) {
  return IsMetricName(name) && name.find(':') == std::string_view::npos &&
         name.substr(0, 2) != "__";
}

// The body of an error response.
std::string ErrorBody(int code) {
  switch (code) {
    case 400:
      return "Bad Request\n";
    case 404:
      return "not found: the metrics are at /metrics\n";
    case 405:
      return "Method Not Allowed\n";
    case 414:
      return "URI Too Long\n";
  }
  return "Error " + std::to_string(code) + "\n";
}

}  // namespace

namespace {

// Label values escape \, " and newline; HELP text only \ and newline.
std::string Escape(std::string_view value, bool quote) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string EscapeLabelValue(std::string_view value) { return Escape(value, true); }

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::trunc(value) && std::fabs(value) < 9007199254740992.0) {
    return std::to_string(static_cast<int64_t>(value));
  }
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  FB_CHECK(ec == std::errc());
  return std::string(buffer, end);
}

void PrometheusWriter::Family(std::string_view name, MetricType type, std::string_view help) {
  FB_CHECK(IsMetricName(name)) << "bad metric name '" << name << "'";
  FB_CHECK(type != MetricType::kCounter ||
           (name.size() > 6 && name.substr(name.size() - 6) == "_total"))
      << "counter '" << name << "' must end in _total";
  FB_CHECK(families_.emplace(name).second) << "metric family '" << name << "' written twice";
  family_ = std::string(name);
  text_ += "# HELP ";
  text_ += name;
  text_ += ' ';
  text_ += Escape(help, false);
  text_ += "\n# TYPE ";
  text_ += name;
  text_ += type == MetricType::kCounter ? " counter\n" : " gauge\n";
}

void PrometheusWriter::Sample(const Labels& labels, double value) {
  FB_CHECK(!family_.empty()) << "PrometheusWriter::Sample before Family";
  text_ += family_;
  if (!labels.empty()) {
    text_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      FB_CHECK(IsLabelName(labels[i].first)) << "bad label name '" << labels[i].first << "'";
      if (i > 0) text_ += ',';
      text_ += labels[i].first;
      text_ += "=\"";
      text_ += EscapeLabelValue(labels[i].second);
      text_ += '"';
    }
    text_ += '}';
  }
  text_ += ' ';
  text_ += FormatMetricValue(value);
  text_ += '\n';
}

void WriteProcessMetrics(PrometheusWriter& writer) {
  std::ifstream stat_file("/proc/self/stat");
  std::string stat;
  if (!std::getline(stat_file, stat)) return;
  // Fields after the command name, which is in parentheses and may hold spaces; field 3
  // (state) is rest[0], so field k is rest[k - 3].
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return;
  std::istringstream fields(stat.substr(close + 2));
  std::vector<std::string> rest;
  for (std::string f; fields >> f;) rest.push_back(f);
  if (rest.size() < 22) return;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  const double utime = std::stod(rest[14 - 3]), stime = std::stod(rest[15 - 3]);
  const double threads = std::stod(rest[20 - 3]), start_ticks = std::stod(rest[22 - 3]);
  const double vsize = std::stod(rest[23 - 3]), rss_pages = std::stod(rest[24 - 3]);
  double boot_time = 0;
  std::ifstream proc_stat("/proc/stat");
  for (std::string line; std::getline(proc_stat, line);) {
    if (line.rfind("btime ", 0) == 0) boot_time = std::stod(line.substr(6));
  }
  int open_fds = 0;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(dir)) open_fds += e->d_name[0] != '.';
    closedir(dir);
    open_fds -= 1;  // the directory stream's own descriptor
  }
  writer.Family("process_cpu_seconds_total", MetricType::kCounter,
                "Total user and system CPU time spent in seconds.");
  writer.Sample((utime + stime) / ticks);
  writer.Family("process_resident_memory_bytes", MetricType::kGauge,
                "Resident memory size in bytes.");
  writer.Sample(rss_pages * page);
  writer.Family("process_virtual_memory_bytes", MetricType::kGauge,
                "Virtual memory size in bytes.");
  writer.Sample(vsize);
  writer.Family("process_open_fds", MetricType::kGauge, "Number of open file descriptors.");
  writer.Sample(open_fds);
  writer.Family("process_start_time_seconds", MetricType::kGauge,
                "Start time of the process since unix epoch in seconds.");
  writer.Sample(boot_time + start_ticks / ticks);
  writer.Family("process_threads", MetricType::kGauge, "Number of OS threads in the process.");
  writer.Sample(threads);
}

// The library's line limits, which kMaxLineBytes states. These are the header's defaults; that
// the shared library was built with them is what OverlongLines_Are414Or400
// (tests/coordinator/metrics_http_test.cc) checks.
static_assert(MetricsHttpServer::kMaxLineBytes == CPPHTTPLIB_REQUEST_URI_MAX_LENGTH &&
              MetricsHttpServer::kMaxLineBytes == CPPHTTPLIB_HEADER_MAX_LENGTH);

MetricsHttpServer::MetricsHttpServer(std::string host, int port,
                                     std::function<std::string()> render)
    : host_(std::move(host)), port_(port), render_(std::move(render)) {
  // The codes this server answers with itself, so that their series exist from the start.
  for (int code : {200, 400, 404, 405, 414}) responses_[code] = 0;
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

std::unique_ptr<httplib::Server> MetricsHttpServer::MakeServer() {
  using httplib::Request, httplib::Response;
  auto server = std::make_unique<httplib::Server>();
  server->new_task_queue = [] { return new httplib::ThreadPool(kThreads); };
  // The library's default sets SO_REUSEPORT, with which a second server would share a port in
  // use instead of failing to bind it.
  server->set_socket_options([](int fd) {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  });
  server->set_keep_alive_max_count(1);  // every response closes its connection
  // The wait for a request's first byte is counted in whole seconds.
  server->set_keep_alive_timeout(std::max(1, (read_timeout_ms_ + 999) / 1000));
  server->set_read_timeout(std::chrono::milliseconds(read_timeout_ms_));
  server->set_write_timeout(std::chrono::milliseconds(read_timeout_ms_));
  // The library parses more methods than GET and HEAD, and takes any request target.
  server->set_pre_routing_handler([](const Request& req, Response& res) {
    if (req.target.empty() || req.target[0] != '/') {
      res.status = 400;
    } else if (req.method != "GET" && req.method != "HEAD") {
      res.status = 405;
      res.set_header("Allow", "GET, HEAD");
    } else {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    return httplib::Server::HandlerResponse::Handled;
  });
  server->Get("/metrics", [this](const Request&, Response& res) {
    std::lock_guard lock(render_mu_);
    res.set_content(render_(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server->set_error_handler([](const Request&, Response& res) {
    res.set_content(ErrorBody(res.status), "text/plain; charset=utf-8");
  });
  // Called for every response written, whoever chose its code.
  server->set_logger([this](const Request&, const Response& res) { CountResponse(res.status); });
  return server;
}

Status MetricsHttpServer::Start() {
  if (server_ != nullptr) return FailedPreconditionError("metrics server already started");
  if (port_ < 0 || port_ > 65535) {
    return InvalidArgumentError("metrics port " + std::to_string(port_) + " is outside 0..65535");
  }
  // The library fails alike for a host that does not resolve and a port in use; resolving first
  // tells them apart.
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host_.empty() ? nullptr : host_.c_str(), "0", &hints, &found);
  if (rc != 0) {
    return InvalidArgumentError("metrics host '" + host_ +
                                "' does not resolve: " + gai_strerror(rc));
  }
  freeaddrinfo(found);

  std::unique_ptr<httplib::Server> server = MakeServer();
  // AI_PASSIVE: an empty host is every interface, not loopback.
  const int bound = port_ == 0 ? server->bind_to_any_port(host_, AI_PASSIVE)
                               : (server->bind_to_port(host_, port_, AI_PASSIVE) ? port_ : -1);
  if (bound < 0) {
    return UnavailableError("metrics server cannot listen on " + host_ + ":" +
                            std::to_string(port_) +
                            ": the port is in use or the address is not this machine's");
  }
  bound_port_ = bound;
  server_ = std::move(server);
  listen_returned_ = false;
  thread_ = std::thread([this] {
    if (!server_->listen_after_bind()) FB_LOG(ERROR) << "metrics server: accept failed";
    listen_returned_ = true;
  });
  // The library's stop() does nothing before the accept loop has marked the server running;
  // waiting for that here keeps a Stop right after Start from being missed.
  while (!server_->is_running() && !listen_returned_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return OkStatus();
}

void MetricsHttpServer::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();  // closes the listening socket; the pool finishes its connections, then ends
  thread_.join();
  server_.reset();
}

void MetricsHttpServer::CountResponse(int code) {
  std::lock_guard lock(responses_mu_);
  ++responses_[code];
}

void MetricsHttpServer::RenderMetrics(PrometheusWriter& writer) const {
  writer.Family("fullband_metrics_http_requests_total", MetricType::kCounter,
                "Requests to the metrics HTTP server, by response status code.");
  std::lock_guard lock(responses_mu_);
  for (const auto& [code, count] : responses_) {
    writer.Sample({{"code", std::to_string(code)}}, static_cast<double>(count));
  }
}

}  // namespace fullband::coordinator
