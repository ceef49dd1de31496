#include "coordinator/grpc_server.h"

#include <absl/synchronization/mutex.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "common/logging.h"
#include "coordinator/proto_convert.h"
#include "coordinator/tls.h"
#include "proto/coordinator.grpc.pb.h"

namespace fullband::coordinator {
namespace {

// The status as gRPC sends it. A message is cut to kMaxMessageBytes: it travels in a header,
// and an oversized one would be answered (and could poison the channel) as RESOURCE_EXHAUSTED.
constexpr size_t kMaxMessageBytes = 1024;

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(static_cast<int>(s.code())),
                      Excerpt(s.message(), kMaxMessageBytes - 32));
}

std::string Authorization(grpc::CallbackServerContext* context) {
  const auto& metadata = context->client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

// Note [Raw requests]: every unary method takes its request's bytes and parses them itself, so
// that bytes that are no message of its type are answered INVALID_ARGUMENT naming the type
// (gRPC's own parse failure reaches the client as UNIMPLEMENTED, "no such method").
template <typename Req, typename Resp>
using HandlerMethod = Status (RpcHandler::*)(std::string_view, const Req&, Resp*);

bool ParseRequest(const grpc::ByteBuffer& in, google::protobuf::Message* request) {
  std::vector<grpc::Slice> slices;
  if (!in.Dump(&slices).ok()) return false;
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return request->ParseFromString(bytes);
}

// Runs the handler on the parsed request and finishes the call — with `durable`, once the
// writes it made are durable.
template <typename Req, typename Resp>
grpc::ServerUnaryReactor* Raw(grpc::CallbackServerContext* context, RpcHandler* handler,
                              const grpc::ByteBuffer* in, grpc::ByteBuffer* out,
                              HandlerMethod<Req, Resp> method, bool durable = true) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Req request;
  if (!ParseRequest(*in, &request)) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "request: not a valid " + Req::descriptor()->full_name()));
    return reactor;
  }
  auto response = std::make_shared<Resp>();
  const Status s = (handler->*method)(Authorization(context), request, response.get());
  auto finish = [reactor, response, out](const Status& status) {
    if (status.ok()) {
      const std::string bytes = response->SerializeAsString();
      grpc::Slice slice(bytes);
      *out = grpc::ByteBuffer(&slice, 1);
    }
    reactor->Finish(ToGrpc(status));
  };
  if (!s.ok() || !durable) {
    finish(s);
  } else {
    handler->AfterDurable(std::move(finish));
  }
  return reactor;
}

class WatchReactor;

// The WatchJob streams alive now, polled by one thread.
class Watchers {
 public:
  void Add(WatchReactor* w) {
    std::lock_guard<std::mutex> lock(mu_);
    set_.insert(w);
  }
  void Remove(WatchReactor* w) {
    std::lock_guard<std::mutex> lock(mu_);
    set_.erase(w);
  }
  template <typename Fn>
  void ForEach(Fn&& fn) {
    std::lock_guard<std::mutex> lock(mu_);
    for (WatchReactor* w : set_) fn(w);
  }

 private:
  std::mutex mu_;
  std::set<WatchReactor*> set_;
};

class WatchReactor final : public grpc::ServerWriteReactor<proto::JobEvent> {
 public:
  WatchReactor(RpcHandler* handler, Watchers* watchers, std::string job_id)
      : handler_(handler), watchers_(watchers), job_id_(std::move(job_id)) {}

  // Sends the job when it changed and no write is in flight; ends after a terminal state.
  // Called with the Watchers lock held.
  void Poll(bool shutting_down) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_ || writing_) return;
    if (shutting_down) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "coordinator shutting down"));
      return;
    }
    if (sent_terminal_) {
      FinishLocked(grpc::Status::OK);
      return;
    }
    StatusOr<JobInfo> job = handler_->WatchState(job_id_);
    if (!job.ok()) {
      FinishLocked(ToGrpc(job.status()));
      return;
    }
    if (sent_any_ && job->version == version_ && !ThroughputChanged(*job)) return;
    version_ = job->version;
    tokens_per_second_ = job->tokens_per_second;
    sent_any_ = true;
    sent_terminal_ = IsTerminal(job->state);
    event_.Clear();
    ToProto(*job, event_.mutable_job());
    writing_ = true;
    StartWrite(&event_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "stream broken"));
  }
  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    if (!writing_) FinishLocked(grpc::Status::CANCELLED);
  }
  void OnDone() override {
    watchers_->Remove(this);
    delete this;
  }

 private:
  bool ThroughputChanged(const JobInfo& job) const {
    return job.tokens_per_second != tokens_per_second_;
  }
  void FinishLocked(const grpc::Status& status) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  RpcHandler* handler_;
  Watchers* watchers_;
  const std::string job_id_;
  std::mutex mu_;
  proto::JobEvent event_;
  uint64_t version_ = 0;
  double tokens_per_second_ = 0;
  bool sent_any_ = false;
  bool sent_terminal_ = false;
  bool writing_ = false;
  bool finished_ = false;
  bool cancelled_ = false;
};

using JS = proto::JobService;
using RawJobService = JS::WithRawCallbackMethod_SubmitJob<JS::WithRawCallbackMethod_GetJob<
    JS::WithRawCallbackMethod_ListJobs<JS::WithRawCallbackMethod_CancelJob<
        JS::WithRawCallbackMethod_GetJobHistory<JS::CallbackService>>>>>;

class JobServiceImpl final : public RawJobService {
 public:
  JobServiceImpl(RpcHandler* handler, Watchers* watchers)
      : handler_(handler), watchers_(watchers) {}

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* c, const grpc::ByteBuffer* in,
                                      grpc::ByteBuffer* out) override {
    return Raw(c, handler_, in, out, &RpcHandler::SubmitJob);
  }
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* c, const grpc::ByteBuffer* in,
                                   grpc::ByteBuffer* out) override {
    return Raw(c, handler_, in, out, &RpcHandler::GetJob);
  }
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* c, const grpc::ByteBuffer* in,
                                     grpc::ByteBuffer* out) override {
    return Raw(c, handler_, in, out, &RpcHandler::ListJobs);
  }
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* c, const grpc::ByteBuffer* in,
                                      grpc::ByteBuffer* out) override {
    return Raw(c, handler_, in, out, &RpcHandler::CancelJob);
  }
  grpc::ServerUnaryReactor* GetJobHistory(grpc::CallbackServerContext* c,
                                          const grpc::ByteBuffer* in,
                                          grpc::ByteBuffer* out) override {
    return Raw(c, handler_, in, out, &RpcHandler::GetJobHistory);
  }
  grpc::ServerWriteReactor<proto::JobEvent>* WatchJob(grpc::CallbackServerContext* c,
                                                      const proto::WatchJobRequest* req) override {
    const Status s = handler_->StartWatch(Authorization(c), *req);
    auto* reactor = new WatchReactor(handler_, watchers_, req->job_id());
    if (!s.ok()) {
      // Not registered with the poller: finish at once; OnDone deletes it.
      reactor->Finish(ToGrpc(s));
      return reactor;
    }
    watchers_->Add(reactor);
    return reactor;
  }

 private:
  RpcHandler* handler_;
  Watchers* watchers_;
};

using WS = proto::WorkerService;
using RawWorkerService =
    WS::WithRawCallbackMethod_RegisterWorkerGroup<WS::WithRawCallbackMethod_Heartbeat<
        WS::WithRawCallbackMethod_LeaseBatches<WS::WithRawCallbackMethod_ReportStep<
            WS::WithRawCallbackMethod_CommitCheckpoint<WS::WithRawCallbackMethod_RollBackCheckpoint<
                WS::WithRawCallbackMethod_ReportFailure<WS::CallbackService>>>>>>>;

class WorkerServiceImpl final : public RawWorkerService {
 public:
  explicit WorkerServiceImpl(RpcHandler* handler) : handler_(handler) {}

  grpc::ServerUnaryReactor* RegisterWorkerGroup(grpc::CallbackServerContext* c,
                                                const grpc::ByteBuffer* in,
                                                grpc::ByteBuffer* out) override {
    return Raw(c, handler_, in, out, &RpcHandler::RegisterWorkerGroup);
  }
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* c, const grpc::ByteBuffer* in,
                                      grpc::ByteBuffer* out) override {
    // A heartbeat writes nothing: answered at once.
    return Raw(c, handler_, in, out, &RpcHandler::Heartbeat, /*durable=*/false);
  }
  grpc::ServerUnaryReactor* LeaseBatches(grpc::CallbackServerContext* c, const grpc::ByteBuffer* in,
                                         grpc::ByteBuffer* out) override {
    return Raw(c, handler_, in, out, &RpcHandler::LeaseBatches);
  }
  grpc::ServerUnaryReactor* ReportStep(grpc::CallbackServerContext* c, const grpc::ByteBuffer* in,
                                       grpc::ByteBuffer* out) override {
    return Raw(c, handler_, in, out, &RpcHandler::ReportStep);
  }
  grpc::ServerUnaryReactor* CommitCheckpoint(grpc::CallbackServerContext* c,
                                             const grpc::ByteBuffer* in,
                                             grpc::ByteBuffer* out) override {
    return Raw(c, handler_, in, out, &RpcHandler::CommitCheckpoint);
  }
  grpc::ServerUnaryReactor* RollBackCheckpoint(grpc::CallbackServerContext* c,
                                               const grpc::ByteBuffer* in,
                                               grpc::ByteBuffer* out) override {
    return Raw(c, handler_, in, out, &RpcHandler::RollBackCheckpoint);
  }
  grpc::ServerUnaryReactor* ReportFailure(grpc::CallbackServerContext* c,
                                          const grpc::ByteBuffer* in,
                                          grpc::ByteBuffer* out) override {
    return Raw(c, handler_, in, out, &RpcHandler::ReportFailure);
  }

 private:
  RpcHandler* handler_;
};

}  // namespace

struct GrpcServer::Impl {
  GrpcServerOptions options;
  RpcHandler* handler;
  Watchers watchers;
  std::unique_ptr<JobServiceImpl> job_service;
  std::unique_ptr<WorkerServiceImpl> worker_service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::thread poller;
  std::mutex mu;
  std::condition_variable stop_cv;
  bool stopping = false;
};

GrpcServer::GrpcServer(GrpcServerOptions options, RpcHandler* handler)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->handler = handler;
}

GrpcServer::~GrpcServer() { Shutdown(); }

int GrpcServer::port() const { return impl_->port; }

Status GrpcServer::Start() {
  Impl& m = *impl_;
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (m.options.tls_cert_file.empty() != m.options.tls_key_file.empty()) {
    return InvalidArgumentError("tls: give both the certificate and the key, or neither");
  }
  if (m.options.tls_cert_file.empty()) {
    credentials = grpc::InsecureServerCredentials();
  } else {
    FB_ASSIGN_OR_RETURN(credentials,
                        MakeServerTlsCredentials(m.options.tls_cert_file, m.options.tls_key_file));
  }
  // Note [Mutex deadlock detection]: Debian's abseil records every lock order of gRPC's
  // absl::Mutex in a graph (GraphCycles), a few percent of each RPC; gRPC's locking is not
  // ours to debug here.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  m.job_service = std::make_unique<JobServiceImpl>(m.handler, &m.watchers);
  m.worker_service = std::make_unique<WorkerServiceImpl>(m.handler);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(m.options.address, credentials, &m.port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(m.options.max_message_bytes));
  builder.RegisterService(m.job_service.get());
  builder.RegisterService(m.worker_service.get());
  m.server = builder.BuildAndStart();
  if (!m.server || m.port == 0) {
    return UnavailableError("cannot serve gRPC on " + m.options.address);
  }
  m.poller = std::thread([&m] {
    std::unique_lock<std::mutex> lock(m.mu);
    while (!m.stopping) {
      m.stop_cv.wait_for(lock, std::chrono::milliseconds(m.options.watch_poll_ms));
      const bool stopping = m.stopping;
      lock.unlock();
      m.watchers.ForEach([&](WatchReactor* w) { w->Poll(stopping); });
      lock.lock();
    }
  });
  FB_LOG(INFO) << "coordinator: gRPC on port " << m.port
               << (m.options.tls_cert_file.empty() ? " (plaintext)" : " (TLS)");
  return OkStatus();
}

void GrpcServer::Shutdown() {
  Impl& m = *impl_;
  if (!m.server) return;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.stopping = true;
  }
  m.stop_cv.notify_all();
  if (m.poller.joinable()) m.poller.join();
  // Ends the watch streams, then the server.
  m.watchers.ForEach([](WatchReactor* w) { w->Poll(/*shutting_down=*/true); });
  m.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  m.server.reset();
}

}  // namespace fullband::coordinator
