// PrometheusWriter, process metrics and MetricsHttpServer (metrics_http.h).
#include "coordinator/metrics_http.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
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

std::string_view ReasonPhrase(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
  }
  return "Error";
}

int64_t MonotonicMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Waits until `fd` is ready for `events` or `wake_fd` is signalled; false on stop, timeout or
// error.
bool WaitReady(int fd, short events, int wake_fd, int64_t deadline_ms) {
  while (true) {
    const int64_t left = deadline_ms - MonotonicMs();
    if (left <= 0) return false;
    pollfd fds[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};
    const int n = poll(fds, 2, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || (fds[1].revents & POLLIN)) return false;
    return true;
  }
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

MetricsHttpServer::MetricsHttpServer(std::string host, int port,
                                     std::function<std::string()> render)
    : host_(std::move(host)), port_(port), render_(std::move(render)) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

Status MetricsHttpServer::Start() {
  if (listen_fd_ >= 0) return FailedPreconditionError("metrics server already started");
  if (port_ < 0 || port_ > 65535) {
    return InvalidArgumentError("metrics port " + std::to_string(port_) + " is outside 0..65535");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* result = nullptr;
  const std::string port_text = std::to_string(port_);
  const int rc =
      getaddrinfo(host_.empty() ? nullptr : host_.c_str(), port_text.c_str(), &hints, &result);
  if (rc != 0) {
    return InvalidArgumentError("metrics host '" + host_ +
                                "' does not resolve: " + gai_strerror(rc));
  }
  std::string bind_error = "no address";
  for (addrinfo* ai = result; ai != nullptr && listen_fd_ < 0; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 64) == 0) {
      listen_fd_ = fd;
    } else {
      bind_error = std::strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(result);
  if (listen_fd_ < 0) {
    return UnavailableError("metrics server cannot listen on " + host_ + ":" + port_text + ": " +
                            bind_error);
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string error = std::strerror(errno);
    close(listen_fd_);
    listen_fd_ = -1;
    return InternalError("metrics server getsockname: " + error);
  }
  bound_port_ = addr.ss_family == AF_INET6
                    ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                    : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    const std::string error = std::strerror(errno);
    close(listen_fd_);
    listen_fd_ = -1;
    return InternalError("metrics server eventfd: " + error);
  }
  thread_ = std::thread([this] { Serve(); });
  return OkStatus();
}

void MetricsHttpServer::Stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) != sizeof(one)) {
    FB_LOG(ERROR) << "metrics server: cannot wake the serving thread: " << std::strerror(errno);
  }
  thread_.join();
  close(listen_fd_);
  close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
}

void MetricsHttpServer::Serve() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const int n = poll(fds, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      FB_LOG(ERROR) << "metrics server poll: " << std::strerror(errno);
      return;
    }
    if (fds[1].revents & POLLIN) return;
    if (fds[0].revents & POLLIN) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) continue;  // the client gave up, or a transient error (EMFILE, ...)
      HandleConnection(fd);
      close(fd);
    }
  }
}

void MetricsHttpServer::HandleConnection(int fd) {
  const int64_t deadline = MonotonicMs() + read_timeout_ms_;
  std::string request;
  size_t head_end = std::string::npos;
  char buffer[4096];
  int code = 0;
  while (head_end == std::string::npos) {
    if (!WaitReady(fd, POLLIN, wake_fd_, deadline)) return;  // timeout or Stop: drop it
    const ssize_t got = recv(fd, buffer, sizeof(buffer), 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) return;  // closed before a complete head: nothing to answer
    request.append(buffer, static_cast<size_t>(got));
    head_end = request.find("\r\n\r\n");
    if (head_end == std::string::npos) head_end = request.find("\n\n");
    if ((head_end == std::string::npos ? request.size() : head_end) > kMaxRequestBytes) {
      code = 431;
      break;
    }
  }

  bool head_only = false;
  if (code == 0) {
    // Request line: METHOD SP target SP HTTP/1.x; then header lines with a colon.
    std::istringstream lines(request.substr(0, head_end));
    std::string line;
    std::getline(lines, line);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
    const bool shape = sp1 != std::string::npos && sp2 != std::string::npos &&
                       line.find(' ', sp2 + 1) == std::string::npos && sp1 > 0;
    const std::string method = shape ? line.substr(0, sp1) : "";
    std::string target = shape ? line.substr(sp1 + 1, sp2 - sp1 - 1) : "";
    const std::string version = shape ? line.substr(sp2 + 1) : "";
    bool ok = shape && !target.empty() && target[0] == '/' && version.rfind("HTTP/1.", 0) == 0 &&
              version.size() == 8;
    for (char c : method) ok = ok && c >= 'A' && c <= 'Z';
    while (ok && std::getline(lines, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      ok = line.find(':') != std::string::npos && line.find(':') > 0;
    }
    target = target.substr(0, target.find('?'));
    if (!ok) {
      code = 400;
    } else if (method != "GET" && method != "HEAD") {
      code = 405;
    } else if (target != "/metrics") {
      code = 404;
    } else {
      code = 200;
      head_only = method == "HEAD";
    }
  }

  std::string body;
  std::string content_type = "text/plain; charset=utf-8";
  if (code == 200) {
    body = render_();
    content_type = "text/plain; version=0.0.4; charset=utf-8";
  } else if (code == 404) {
    body = "not found: the metrics are at /metrics\n";
  } else {
    body = std::string(ReasonPhrase(code)) + "\n";
  }
  std::string response = "HTTP/1.1 " + std::to_string(code) + " " +
                         std::string(ReasonPhrase(code)) + "\r\nContent-Type: " + content_type +
                         "\r\nContent-Length: " + std::to_string(body.size()) +
                         "\r\nConnection: close\r\n";
  if (code == 405) response += "Allow: GET, HEAD\r\n";
  response += "\r\n";
  if (!head_only) response += body;
  switch (code) {
    case 200:
      responses_200_.fetch_add(1, std::memory_order_relaxed);
      break;
    case 400:
      responses_400_.fetch_add(1, std::memory_order_relaxed);
      break;
    case 404:
      responses_404_.fetch_add(1, std::memory_order_relaxed);
      break;
    case 405:
      responses_405_.fetch_add(1, std::memory_order_relaxed);
      break;
    default:
      responses_431_.fetch_add(1, std::memory_order_relaxed);
  }

  const int64_t write_deadline = MonotonicMs() + read_timeout_ms_;
  size_t sent = 0;
  while (sent < response.size()) {
    const ssize_t n = send(fd, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!WaitReady(fd, POLLOUT, wake_fd_, write_deadline)) return;
    } else {
      return;
    }
  }
  // Read what the client still sends (briefly) so that closing does not reset the connection
  // before it has read the response.
  shutdown(fd, SHUT_WR);
  const int64_t linger_deadline = MonotonicMs() + 200;
  while (WaitReady(fd, POLLIN, wake_fd_, linger_deadline)) {
    const ssize_t got = recv(fd, buffer, sizeof(buffer), 0);
    if (got <= 0 && !(got < 0 && errno == EINTR)) break;
  }
}

void MetricsHttpServer::RenderMetrics(PrometheusWriter& writer) const {
  writer.Family("fullband_metrics_http_requests_total", MetricType::kCounter,
                "Requests to the metrics HTTP server, by response status code.");
  writer.Sample({{"code", "200"}}, static_cast<double>(responses_200_.load()));
  writer.Sample({{"code", "400"}}, static_cast<double>(responses_400_.load()));
  writer.Sample({{"code", "404"}}, static_cast<double>(responses_404_.load()));
  writer.Sample({{"code", "405"}}, static_cast<double>(responses_405_.load()));
  writer.Sample({{"code", "431"}}, static_cast<double>(responses_431_.load()));
}

}  // namespace fullband::coordinator
