// tpu rows in torch.profiler: a Kineto activity profiler over the runtime's
// trace (ttpu_trace_*).
//
// PyTorch forwards a PrivateUse1 backend's IActivityProfiler to Kineto. For
// each profiling session Kineto asks it for a session: ours turns the
// runtime's span recorder on at start and, when the trace is processed,
// hands every span recorded since as a Kineto activity with the runtime's
// own timestamps. Host-side spans (op, record, flush, compile, transfer,
// collective) are PRIVATEUSE1_RUNTIME activities named "tpu::<what> <name>",
// on the row of the thread that made them, under its aten op;
// device execution, which ends asynchronously, is a CONCURRENT_KERNEL
// activity on the tpu device, from launch to completion. Nothing is recorded
// outside a session, so the profiler costs nothing when it is off.
// Kineto's activity metadata formats with {fmt}, which torch uses but does
// not export: compile the formatting functions into this file.
#define FMT_HEADER_ONLY 1
#include "tpu.h"

#include <IActivityProfiler.h>
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <unistd.h>

#include <deque>
#include <set>
#include <string>
#include <vector>

namespace torchtpu_ext {
namespace {

libkineto::ActivityType activity_type(int32_t category) {
  return category == TTPU_TRACE_CATEGORY_EXECUTE ? libkineto::ActivityType::CONCURRENT_KERNEL
                                                   : libkineto::ActivityType::PRIVATEUSE1_RUNTIME;
}

const char* category_name(int32_t category) {
  switch (category) {
    case TTPU_TRACE_CATEGORY_OP: return "op";
    case TTPU_TRACE_CATEGORY_RECORD: return "record";
    case TTPU_TRACE_CATEGORY_FLUSH: return "flush";
    case TTPU_TRACE_CATEGORY_COMPILE: return "compile";
    case TTPU_TRACE_CATEGORY_EXECUTE: return "execute";
    case TTPU_TRACE_CATEGORY_TRANSFER: return "transfer";
    case TTPU_TRACE_CATEGORY_COLLECTIVE: return "collective";
    default: return "runtime";
  }
}

class Session final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    cursor_ = ttpu_trace_start();
    recording_ = true;
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    if (recording_) ttpu_trace_stop();
    recording_ = false;
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    ttpu_trace_t* trace = nullptr;
    if (ttpu_error_t* e = ttpu_trace_read(cursor_, &trace)) {
      errors_.emplace_back(std::string("torchtpu: reading the runtime trace failed: ") + ttpu_error_message(e));
      ttpu_error_destroy(e);
      return;
    }
    const size_t n = ttpu_trace_count(trace);
    for (size_t i = 0; i < n; ++i) {
      ttpu_trace_span_t s{};
      s.struct_size = sizeof s;
      if (ttpu_error_t* e = ttpu_trace_get(trace, i, &s)) {
        ttpu_error_destroy(e);
        continue;
      }
      // Device runs are named like CUDA kernels (the op or program), host
      // spans by what the runtime did: "tpu::compile aten::addmm".
      const std::string what(s.name, s.name_len);
      const std::string name = s.category == TTPU_TRACE_CATEGORY_EXECUTE
                                   ? what
                                   : std::string("tpu::") + category_name(s.category) + " " + what;
      // Kineto keeps a pointer to the span of every activity it is given.
      const libkineto::TraceSpan& span = spans_.emplace_back(0, 0, "tpu");
      libkineto::GenericTraceActivity a(span, activity_type(s.category), name);
      a.startTime = static_cast<int64_t>(s.start_ns);
      a.endTime = static_cast<int64_t>(s.start_ns + s.duration_ns);
      const bool device = s.category == TTPU_TRACE_CATEGORY_EXECUTE && s.device >= 0;
      a.device = device ? static_cast<int32_t>(s.device) : static_cast<int32_t>(getpid());
      // Host spans on their thread's row, under the aten op that made them.
      a.resource = device ? 0 : static_cast<int32_t>(s.thread);
      a.threadId = static_cast<int32_t>(s.thread);
      a.addMetadataQuoted("tpu_category", category_name(s.category));
      if (s.detail_len > 0) a.addMetadataQuoted("tpu_detail", std::string(s.detail, s.detail_len));
      if (s.device >= 0) a.addMetadata("tpu_device", s.device);
      logger.handleGenericActivity(a);
    }
    ttpu_trace_destroy(trace);
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(0, 0, "tpu", "tpu");
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {}; }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

 private:
  uint64_t cursor_ = 0;
  bool recording_ = false;
  std::vector<std::string> errors_;
  std::deque<libkineto::TraceSpan> spans_;
};

class TpuActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<libkineto::ActivityType>& availableActivities() const override { return activities_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<libkineto::ActivityType>&,
                                                                  const libkineto::Config&) override {
    return std::make_unique<Session>();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
                                                                  const std::set<libkineto::ActivityType>& types,
                                                                  const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_{"torchtpu"};
  std::set<libkineto::ActivityType> activities_{libkineto::ActivityType::PRIVATEUSE1_RUNTIME,
                                                 libkineto::ActivityType::CONCURRENT_KERNEL};
};

REGISTER_PRIVATEUSE1_PROFILER(TpuActivityProfiler);

}  // namespace
}  // namespace torchtpu_ext
