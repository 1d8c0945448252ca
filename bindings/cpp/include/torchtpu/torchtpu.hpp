// torchtpu C++ API: a header-only C++17 wrapper over the C ABI in <torchtpu.h>.
//
// Ownership, in one place:
// - `Runtime`, `Tensor`, `Stream`, `Event` and `Generator` are move-only
//   owners of one C handle each. The destructor calls the matching `ttpu_*_destroy`; a
//   moved-from owner is empty (`capi() == nullptr`, `operator bool` false)
//   and its destructor does nothing. `capi()` borrows the handle; `release()`
//   gives it up (the caller then owns it and must destroy it).
// - `Device` is a non-owning view of a device borrowed from its runtime:
//   valid while the runtime lives.
// - A `Tensor` (and a `Stream`) remembers the runtime it came from without
//   owning it. Destroying a tensor after its runtime is fine (the C ABI keeps
//   its memory alive), but calling ops or `to_host` on it needs the
//   `Runtime` to be alive.
// - A `Generator` does not borrow its runtime. Like a `Stream`, several
//   handles may name one generator (`Generator::default_for` twice).
// - `Arg` borrows the tensors and generators it names (they must outlive
//   the call) and copies strings and int lists.
//
// Errors: every fallible call throws `torchtpu::Error`, which carries the C
// ABI's status code (`ttpu_code`) and message. Using an empty (moved-from)
// owner throws `Error` with code INVALID_ARGUMENT.
#pragma once

#include <torchtpu.h>

#include <array>
#include <chrono>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace torchtpu {

// ------------------------------------------------------------------ errors

/// An error from the C ABI: its status code (an abseil code, `ttpu_code`)
/// and its message.
class Error : public std::runtime_error {
 public:
  Error(ttpu_code code, const std::string& message) : std::runtime_error(message), code_(code) {}

  /// The status code (`TTPU_CODE_*`).
  ttpu_code code() const noexcept { return code_; }

 private:
  ttpu_code code_;
};

namespace detail {

/// Takes ownership of `err`: does nothing for NULL (success); otherwise reads
/// its code and message, destroys it and throws `Error`.
inline void check(ttpu_error_t* err) {
  if (err == nullptr) return;
  const ttpu_code code = ttpu_error_code(err);
  const char* msg = ttpu_error_message(err);
  std::string message = msg != nullptr ? msg : "";
  ttpu_error_destroy(err);
  throw Error(code, message);
}

[[noreturn]] inline void empty_handle(const char* what) {
  throw Error(TTPU_CODE_INVALID_ARGUMENT, std::string("torchtpu::") + what + ": empty (moved-from or released) handle");
}

inline std::string str_or_empty(const char* s) { return s != nullptr ? std::string(s) : std::string(); }

/// A move-only owner of `T*` whose destructor calls `Destroy`.
template <class T, void (*Destroy)(T*)>
class Owned {
 public:
  Owned() noexcept = default;
  explicit Owned(T* p) noexcept : p_(p) {}
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  Owned(Owned&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  ~Owned() { reset(); }

  T* get() const noexcept { return p_; }
  T* release() noexcept { return std::exchange(p_, nullptr); }
  void reset() noexcept {
    if (p_ != nullptr) Destroy(std::exchange(p_, nullptr));
  }

 private:
  T* p_ = nullptr;
};

}  // namespace detail

// ------------------------------------------------------------------- enums

/// Element types; the values are `ttpu_dtype` (PyTorch's ScalarType codes).
enum class DType : int32_t {
  UInt8 = TTPU_DTYPE_UINT8,
  Int8 = TTPU_DTYPE_INT8,
  Int16 = TTPU_DTYPE_INT16,
  Int32 = TTPU_DTYPE_INT32,
  Int64 = TTPU_DTYPE_INT64,
  Float16 = TTPU_DTYPE_FLOAT16,
  Float32 = TTPU_DTYPE_FLOAT32,
  Float64 = TTPU_DTYPE_FLOAT64,
  Complex64 = TTPU_DTYPE_COMPLEX64,
  Complex128 = TTPU_DTYPE_COMPLEX128,
  Bool = TTPU_DTYPE_BOOL,
  BFloat16 = TTPU_DTYPE_BFLOAT16,
};

/// Bytes per element of `d` (0 for a value outside the enum).
inline std::size_t element_size(DType d) noexcept {
  switch (d) {
    case DType::UInt8:
    case DType::Int8:
    case DType::Bool:
      return 1;
    case DType::Int16:
    case DType::Float16:
    case DType::BFloat16:
      return 2;
    case DType::Int32:
    case DType::Float32:
      return 4;
    case DType::Int64:
    case DType::Float64:
    case DType::Complex64:
      return 8;
    case DType::Complex128:
      return 16;
  }
  return 0;
}

/// The dtype's name ("float32", ...).
inline const char* dtype_name(DType d) noexcept {
  switch (d) {
    case DType::UInt8: return "uint8";
    case DType::Int8: return "int8";
    case DType::Int16: return "int16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Float16: return "float16";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Complex64: return "complex64";
    case DType::Complex128: return "complex128";
    case DType::Bool: return "bool";
    case DType::BFloat16: return "bfloat16";
  }
  return "unknown";
}

/// Execution modes; the values are `ttpu_mode`.
enum class Mode : int32_t {
  DeferNever = TTPU_MODE_DEFER_NEVER,
  DeferNeverAndLaunchBlocking = TTPU_MODE_DEFER_NEVER_AND_LAUNCH_BLOCKING,
  DeferAndFuse = TTPU_MODE_DEFER_AND_FUSE,
};

/// A bool element for host buffers (`std::vector<bool>` is a bit set and
/// has no contiguous storage): one byte, 0 or 1.
struct Bool {
  bool value = false;
  constexpr Bool() noexcept = default;
  constexpr Bool(bool v) noexcept : value(v) {}  // NOLINT(google-explicit-constructor)
  constexpr operator bool() const noexcept { return value; }  // NOLINT(google-explicit-constructor)
};
static_assert(sizeof(Bool) == 1, "torchtpu::Bool must be one byte");

/// The dtype of host element type `T`; `dtype_of<T>::value`.
template <class T>
struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct dtype_of<int16_t> { static constexpr DType value = DType::Int16; };
template <> struct dtype_of<int8_t> { static constexpr DType value = DType::Int8; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::UInt8; };
template <> struct dtype_of<Bool> { static constexpr DType value = DType::Bool; };
/// PyTorch's interleaved layout is `std::complex`'s (API 1.8).
template <> struct dtype_of<std::complex<float>> { static constexpr DType value = DType::Complex64; };
template <> struct dtype_of<std::complex<double>> { static constexpr DType value = DType::Complex128; };

// ------------------------------------------------------------------ modes

/// Sets the process-wide execution mode.
inline void set_mode(Mode m) { detail::check(ttpu_process_set_mode(static_cast<int32_t>(m))); }
/// The process-wide execution mode.
inline Mode get_mode() { return static_cast<Mode>(ttpu_process_mode()); }
/// Overrides the mode for the calling thread.
inline void set_thread_mode(Mode m) { detail::check(ttpu_thread_set_mode(static_cast<int32_t>(m))); }
/// Drops the calling thread's override: it follows the process mode again.
inline void clear_thread_mode() { detail::check(ttpu_thread_set_mode(-1)); }
/// The mode in effect on the calling thread.
inline Mode current_mode() { return static_cast<Mode>(ttpu_thread_effective_mode()); }

/// Sets the calling thread's mode for the guard's scope, then restores the
/// thread's own override exactly as it was (`ttpu_thread_mode`): a mode, or
/// -1, so that a thread that followed the process mode follows it again,
/// even if the process mode changed meanwhile.
class ThreadModeGuard {
 public:
  explicit ThreadModeGuard(Mode m) {
    prev_ = ttpu_thread_mode();
    detail::check(ttpu_thread_set_mode(static_cast<int32_t>(m)));
  }
  ThreadModeGuard(const ThreadModeGuard&) = delete;
  ThreadModeGuard& operator=(const ThreadModeGuard&) = delete;
  ThreadModeGuard(ThreadModeGuard&&) = delete;
  ThreadModeGuard& operator=(ThreadModeGuard&&) = delete;
  ~ThreadModeGuard() { ttpu_error_destroy(ttpu_thread_set_mode(prev_)); }

  /// What the destructor restores (a `ttpu_mode`, or -1 for no override).
  int32_t previous() const noexcept { return prev_; }

 private:
  int32_t prev_;
};

// ----------------------------------------------------------------- forward

class Runtime;
class Tensor;
class Stream;
class Event;

/// A device of a runtime: a non-owning view of a `ttpu_device_t` borrowed
/// from the runtime (valid while the runtime lives). Cheap to copy.
class Device {
 public:
  explicit Device(const ttpu_device_t* d) noexcept : d_(d) {}
  /// The index in its runtime (what tensors and ops call `device`).
  int64_t index() const noexcept { return ttpu_device_index(d_); }
  /// The PJRT device id.
  int32_t id() const noexcept { return ttpu_device_id(d_); }
  int32_t local_hardware_id() const noexcept { return ttpu_device_local_hardware_id(d_); }
  /// The device kind ("cpu", "TPU v5 lite").
  std::string kind() const { return detail::str_or_empty(ttpu_device_kind(d_)); }
  std::string description() const { return detail::str_or_empty(ttpu_device_description(d_)); }
  const ttpu_device_t* capi() const noexcept { return d_; }

 private:
  const ttpu_device_t* d_;
};

// ------------------------------------------------------------------ tensor

/// An owned tensor handle (a view of device memory). Move-only; the
/// destructor calls `ttpu_tensor_destroy`. It borrows the runtime it came
/// from (see the file comment). A default-constructed or moved-from Tensor
/// is empty; so is a None result of `call`.
class Tensor {
 public:
  Tensor() noexcept = default;
  /// Takes ownership of `owned`; `runtime` is borrowed (not owned).
  Tensor(const ttpu_runtime_t* runtime, ttpu_tensor_t* owned) noexcept : rt_(runtime), h_(owned) {}
  Tensor(Tensor&& o) noexcept : rt_(std::exchange(o.rt_, nullptr)), h_(std::move(o.h_)) {}
  Tensor& operator=(Tensor&& o) noexcept {
    if (this != &o) {
      h_ = std::move(o.h_);
      rt_ = std::exchange(o.rt_, nullptr);
    }
    return *this;
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() = default;

  /// Borrows the handle (nullptr when empty).
  ttpu_tensor_t* capi() const noexcept { return h_.get(); }
  /// Gives up the handle; the caller must `ttpu_tensor_destroy` it.
  ttpu_tensor_t* release() noexcept {
    rt_ = nullptr;
    return h_.release();
  }
  /// The runtime this tensor uses for calls (borrowed).
  const ttpu_runtime_t* runtime() const noexcept { return rt_; }
  explicit operator bool() const noexcept { return h_.get() != nullptr; }

  /// A new owned handle to the same view (storage shared, not copied).
  Tensor retain() const {
    ttpu_tensor_t* out = nullptr;
    detail::check(ttpu_tensor_retain(handle("Tensor::retain"), &out));
    return Tensor(rt_, out);
  }

  DType dtype() const { return static_cast<DType>(ttpu_tensor_dtype(handle("Tensor::dtype"))); }
  std::size_t ndim() const { return ttpu_tensor_ndim(handle("Tensor::ndim")); }
  std::vector<int64_t> shape() const {
    const ttpu_tensor_t* h = handle("Tensor::shape");
    const int64_t* p = ttpu_tensor_sizes(h);
    return p != nullptr ? std::vector<int64_t>(p, p + ttpu_tensor_ndim(h)) : std::vector<int64_t>();
  }
  /// Strides in elements.
  std::vector<int64_t> strides() const {
    const ttpu_tensor_t* h = handle("Tensor::strides");
    const int64_t* p = ttpu_tensor_strides(h);
    return p != nullptr ? std::vector<int64_t>(p, p + ttpu_tensor_ndim(h)) : std::vector<int64_t>();
  }
  int64_t offset() const { return ttpu_tensor_offset(handle("Tensor::offset")); }
  int64_t numel() const { return ttpu_tensor_numel(handle("Tensor::numel")); }
  /// The device index the tensor lives on.
  int64_t device() const { return ttpu_tensor_device(handle("Tensor::device")); }
  bool same_storage(const Tensor& o) const {
    return ttpu_tensor_same_storage(handle("Tensor::same_storage"), o.handle("Tensor::same_storage"));
  }

  /// Another view of this tensor's storage with the geometry `(sizes,
  /// strides, offset)`, in elements, absolute in the storage (like
  /// `as_strided`). Writes through it are seen by every view.
  Tensor view(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, int64_t offset) const {
    if (sizes.size() != strides.size()) {
      throw Error(TTPU_CODE_INVALID_ARGUMENT, "torchtpu::Tensor::view: sizes and strides differ in rank");
    }
    ttpu_tensor_t* out = nullptr;
    detail::check(ttpu_tensor_view(handle("Tensor::view"), sizes.data(), strides.data(), sizes.size(), offset, &out));
    return Tensor(rt_, out);
  }
  /// The number of elements of the storage this tensor views.
  int64_t storage_numel() const { return ttpu_tensor_storage_numel(handle("Tensor::storage_numel")); }

  /// A dense row-major copy of the elements, as raw bytes (any dtype,
  /// including float16/bfloat16). Waits for pending work on the tensor.
  std::vector<uint8_t> to_bytes() const {
    const ttpu_tensor_t* h = handle("Tensor::to_bytes");
    const std::size_t n = static_cast<std::size_t>(ttpu_tensor_numel(h)) * element_size(dtype());
    std::vector<uint8_t> out(n);
    detail::check(ttpu_tensor_to_host(rt_, h, out.data(), n));
    return out;
  }

  /// A dense row-major copy of the elements. `T` must match `dtype()`
  /// (`dtype_of<T>`; use `Bool` for bool tensors), else throws `Error`
  /// (INVALID_ARGUMENT).
  template <class T>
  std::vector<T> to_host() const {
    const ttpu_tensor_t* h = handle("Tensor::to_host");
    const DType want = dtype_of<T>::value;
    const DType got = dtype();
    if (got != want) {
      throw Error(TTPU_CODE_INVALID_ARGUMENT, std::string("torchtpu::Tensor::to_host: tensor has dtype ") +
                                                  dtype_name(got) + " but the host type is " + dtype_name(want));
    }
    std::vector<T> out(static_cast<std::size_t>(ttpu_tensor_numel(h)));
    detail::check(ttpu_tensor_to_host(rt_, h, out.data(), out.size() * sizeof(T)));
    return out;
  }

  /// Copies `data` (dense, row-major, dtype from `T`) of shape `shape` to
  /// device `device`. `data.size()` must equal the product of `shape`.
  template <class T>
  static Tensor from_host(const Runtime& rt, const std::vector<T>& data, std::vector<int64_t> shape,
                          int64_t device = 0);

  /// Copies `nbytes` of raw dense row-major data of dtype `dtype`.
  static Tensor from_bytes(const Runtime& rt, const void* data, std::size_t nbytes, DType dtype,
                           const std::vector<int64_t>& shape, int64_t device = 0);

 private:
  const ttpu_tensor_t* handle(const char* what) const {
    if (h_.get() == nullptr) detail::empty_handle(what);
    return h_.get();
  }

  const ttpu_runtime_t* rt_ = nullptr;
  detail::Owned<ttpu_tensor_t, ttpu_tensor_destroy> h_;
};

// ------------------------------------------------------------ stream/event

/// An owned event handle: a point recorded on a stream. Move-only; the
/// destructor calls `ttpu_event_destroy` (streams already waiting on it
/// still wait for its record).
class Event {
 public:
  /// Creates an event, not yet recorded.
  Event() {
    ttpu_event_t* out = nullptr;
    detail::check(ttpu_event_create(&out));
    h_ = detail::Owned<ttpu_event_t, ttpu_event_destroy>(out);
  }
  /// Takes ownership of `owned`.
  explicit Event(ttpu_event_t* owned) noexcept : h_(owned) {}

  ttpu_event_t* capi() const noexcept { return h_.get(); }
  ttpu_event_t* release() noexcept { return h_.release(); }
  explicit operator bool() const noexcept { return h_.get() != nullptr; }

  /// Records the event on `stream` (defined after Stream).
  void record(const Stream& stream);
  /// Blocks until the event completed; throws the error its work hit.
  void synchronize() { detail::check(ttpu_event_synchronize(handle("Event::synchronize"))); }
  /// Whether the event completed (true if never recorded). Does not block.
  bool query() const {
    bool done = false;
    detail::check(ttpu_event_query(handle("Event::query"), &done));
    return done;
  }
  /// Milliseconds from this event's completion to `end`'s. Both must have
  /// been recorded and have completed.
  double elapsed_ms(const Event& end) const {
    double ms = 0.0;
    detail::check(ttpu_event_elapsed_ms(handle("Event::elapsed_ms"), end.handle("Event::elapsed_ms"), &ms));
    return ms;
  }

 private:
  friend class Stream;
  const ttpu_event_t* handle(const char* what) const {
    if (h_.get() == nullptr) detail::empty_handle(what);
    return h_.get();
  }
  detail::Owned<ttpu_event_t, ttpu_event_destroy> h_;
};

/// An owned stream handle: an ordered queue of work on one device. Several
/// handles may name the same stream; the destructor calls
/// `ttpu_stream_destroy`, which frees this handle (and, for the last handle
/// of a created stream, waits for its work and ends its worker).
class Stream {
 public:
  Stream() noexcept = default;
  /// Takes ownership of `owned`.
  explicit Stream(ttpu_stream_t* owned) noexcept : h_(owned) {}

  ttpu_stream_t* capi() const noexcept { return h_.get(); }
  ttpu_stream_t* release() noexcept { return h_.release(); }
  explicit operator bool() const noexcept { return h_.get() != nullptr; }

  /// The device index, or -1 when empty.
  int64_t device() const noexcept { return ttpu_stream_device(h_.get()); }
  /// 0 for a default stream, 1, 2, ... for created ones; -1 when empty.
  int64_t id() const noexcept { return ttpu_stream_id(h_.get()); }
  /// Whether two handles name the same stream.
  bool operator==(const Stream& o) const noexcept { return ttpu_stream_same(h_.get(), o.h_.get()); }
  bool operator!=(const Stream& o) const noexcept { return !(*this == o); }

  /// Waits for all work submitted so far; throws the first error it hit.
  void synchronize() { detail::check(ttpu_stream_synchronize(handle("Stream::synchronize"))); }
  /// Whether all submitted work has completed. Does not block.
  bool query() const {
    bool idle = false;
    detail::check(ttpu_stream_query(handle("Stream::query"), &idle));
    return idle;
  }
  /// Makes later work on this stream wait for `event` (host does not block).
  void wait_event(const Event& event) {
    detail::check(ttpu_stream_wait_event(handle("Stream::wait_event"), event.handle("Stream::wait_event")));
  }
  /// Records a new event on this stream and returns it.
  Event record_event() const {
    Event e;
    detail::check(ttpu_event_record(e.handle("Stream::record_event"), handle("Stream::record_event")));
    return e;
  }

 private:
  friend class Event;
  const ttpu_stream_t* handle(const char* what) const {
    if (h_.get() == nullptr) detail::empty_handle(what);
    return h_.get();
  }
  detail::Owned<ttpu_stream_t, ttpu_stream_destroy> h_;
};

inline void Event::record(const Stream& stream) {
  detail::check(ttpu_event_record(handle("Event::record"), stream.handle("Event::record")));
}

// ----------------------------------------------------------------- runtime

/// Runtime counters (`ttpu_stats_t`).
using Stats = ttpu_stats_t;
/// Fused-mode counters (`ttpu_fusion_stats_t`).
using FusionStats = ttpu_fusion_stats_t;
/// One device's buffer accounting (see `ttpu_memory_stats_t`).
using MemoryStats = ttpu_memory_stats_t;
/// One device's total and free memory (see `ttpu_memory_info_t`).
using MemoryInfo = ttpu_memory_info_t;

/// A key-value store shared by every process of a client that spans
/// processes (`ttpu_kv_store_t`). PJRT calls it from its own threads,
/// concurrently: implementations must be thread-safe. Failures are thrown
/// as `Error`, whose code the plugin sees.
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  /// The value of `key`, waiting up to `timeout` for another process to put
  /// it (throw DEADLINE_EXCEEDED past it). A negative `timeout` does not
  /// wait: throw NOT_FOUND for an absent key.
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  virtual void put(const std::string& key, const std::string& value) = 0;
};

/// How a runtime joins a client that spans `num_nodes` processes (PJRT's
/// `node_id` and `num_nodes`, with `store` behind its key-value callbacks).
struct Distributed {
  int32_t node_id = 0;
  int32_t num_nodes = 1;
  std::shared_ptr<KeyValueStore> store;
};

namespace detail {

/// `ttpu_kv_store_t` over a `KeyValueStore`: the callbacks catch every
/// exception, since none may cross the C ABI.
struct KvAdapter {
  static ttpu_error_t* failure(const std::exception& e) {
    const auto* err = dynamic_cast<const Error*>(&e);
    return ttpu_error_create(err != nullptr ? err->code() : TTPU_CODE_INTERNAL, e.what());
  }
  static ttpu_error_t* get(void* user, const char* key, size_t key_size, int64_t timeout_ms, char** value,
                           size_t* value_size, ttpu_kv_value_deleter_t* deleter) {
    try {
      std::string v = static_cast<std::shared_ptr<KeyValueStore>*>(user)->get()->get(
          std::string(key, key_size), std::chrono::milliseconds(timeout_ms));
      char* copy = new char[v.size() + 1];
      std::memcpy(copy, v.data(), v.size());
      *value = copy;
      *value_size = v.size();
      *deleter = [](char* p) { delete[] p; };
      return nullptr;
    } catch (const std::exception& e) {
      return failure(e);
    } catch (...) {
      return ttpu_error_create(TTPU_CODE_INTERNAL, "torchtpu::KeyValueStore::get threw a non-std exception");
    }
  }
  static ttpu_error_t* put(void* user, const char* key, size_t key_size, const char* value, size_t value_size) {
    try {
      static_cast<std::shared_ptr<KeyValueStore>*>(user)->get()->put(std::string(key, key_size),
                                                                      std::string(value, value_size));
      return nullptr;
    } catch (const std::exception& e) {
      return failure(e);
    } catch (...) {
      return ttpu_error_create(TTPU_CODE_INTERNAL, "torchtpu::KeyValueStore::put threw a non-std exception");
    }
  }
  static void release(void* user) { delete static_cast<std::shared_ptr<KeyValueStore>*>(user); }
};

}  // namespace detail

/// An owned runtime (one PJRT plugin and client with its devices).
/// Move-only; the destructor calls `ttpu_runtime_destroy`. Thread-safe.
class Runtime {
 public:
  /// Creates a runtime. `plugin_path` empty: search for a plugin
  /// (`TORCHTPU_PJRT_PLUGIN`, libtpu, then the `xla-cpu-pjrt` package).
  /// `cpu_device_count` 0 keeps the plugin's default. `distributed`, when
  /// its store is set, joins a client that spans processes.
  explicit Runtime(const std::string& plugin_path = std::string(), int32_t cpu_device_count = 0,
                   const Distributed& distributed = Distributed()) {
    ttpu_runtime_options_t opts{};
    opts.struct_size = sizeof(ttpu_runtime_options_t);
    opts.plugin_path = plugin_path.empty() ? nullptr : plugin_path.c_str();
    opts.cpu_device_count = cpu_device_count;
    ttpu_kv_store_t kv{};
    if (distributed.store) {
      kv.struct_size = sizeof(ttpu_kv_store_t);
      // The runtime owns this reference from here on and drops it through
      // `release`, also when creation fails.
      kv.user_data = new std::shared_ptr<KeyValueStore>(distributed.store);
      kv.get = &detail::KvAdapter::get;
      kv.put = &detail::KvAdapter::put;
      kv.release = &detail::KvAdapter::release;
      opts.node_id = distributed.node_id;
      opts.num_nodes = distributed.num_nodes;
      opts.kv_store = &kv;
    }
    ttpu_runtime_t* out = nullptr;
    detail::check(ttpu_runtime_create(&opts, &out));
    h_ = detail::Owned<ttpu_runtime_t, ttpu_runtime_destroy>(out);
  }
  /// Takes ownership of `owned`.
  explicit Runtime(ttpu_runtime_t* owned) noexcept : h_(owned) {}

  ttpu_runtime_t* capi() const noexcept { return h_.get(); }
  ttpu_runtime_t* release() noexcept { return h_.release(); }
  explicit operator bool() const noexcept { return h_.get() != nullptr; }

  /// The PJRT platform name ("cpu", "tpu", ...).
  std::string platform_name() const { return detail::str_or_empty(ttpu_runtime_platform_name(handle("platform_name"))); }
  std::string platform_version() const {
    return detail::str_or_empty(ttpu_runtime_platform_version(handle("platform_version")));
  }

  std::size_t device_count() const {
    std::size_t n = 0;
    detail::check(ttpu_runtime_device_count(handle("device_count"), &n));
    return n;
  }
  /// Device `index`; throws OUT_OF_RANGE for a bad index.
  Device device(int64_t index) const {
    const ttpu_device_t* d = nullptr;
    detail::check(ttpu_runtime_device(handle("device"), index, &d));
    return Device(d);
  }
  std::vector<Device> devices() const {
    std::vector<Device> out;
    const std::size_t n = device_count();
    out.reserve(n);
    for (std::size_t i = 0; i < n; ++i) out.push_back(device(static_cast<int64_t>(i)));
    return out;
  }

  /// Waits for all launched work; throws the first asynchronous error.
  void synchronize() const { detail::check(ttpu_runtime_synchronize(handle("synchronize"))); }
  /// Shuts the runtime down before the process exits (see
  /// `ttpu_runtime_shutdown`): waits for work in flight, joins the stream
  /// workers and destroys the PJRT client; later device calls throw
  /// FAILED_PRECONDITION, while tensors can still be destroyed. A negative
  /// timeout waits as long as it takes. Throws the error of the work it
  /// waited for, or DEADLINE_EXCEEDED (then the runtime was left running).
  void shutdown(std::chrono::milliseconds timeout = std::chrono::milliseconds(-1)) const {
    detail::check(ttpu_runtime_shutdown(handle("shutdown"), static_cast<int64_t>(timeout.count())));
  }
  void manual_seed(uint64_t seed) const { detail::check(ttpu_runtime_manual_seed(handle("manual_seed"), seed)); }
  void clear_cache() const { detail::check(ttpu_runtime_clear_cache(handle("clear_cache"))); }
  Stats stats() const {
    Stats s{};
    s.struct_size = sizeof(Stats);
    detail::check(ttpu_runtime_stats(handle("stats"), &s));
    return s;
  }
  /// Live and peak bytes of device buffers on device `index`.
  std::pair<int64_t, int64_t> memory(int64_t index = 0) const {
    int64_t live = 0;
    int64_t peak = 0;
    detail::check(ttpu_runtime_memory(handle("memory"), index, &live, &peak));
    return {live, peak};
  }

  /// Resets the peak `memory(index)` reports to the bytes live now.
  void reset_peak_memory(int64_t index = 0) const {
    detail::check(ttpu_runtime_reset_peak_memory(handle("reset_peak_memory"), index));
  }
  /// Device `index`'s buffer accounting: bytes and buffers live, peak,
  /// allocated and freed, and OOMs.
  MemoryStats memory_stats(int64_t index = 0) const {
    MemoryStats s{};
    s.struct_size = sizeof(MemoryStats);
    detail::check(ttpu_runtime_memory_stats(handle("memory_stats"), index, &s));
    return s;
  }
  /// Zeroes device `index`'s allocated and freed totals and OOM count.
  void reset_accumulated_memory(int64_t index = 0) const {
    detail::check(ttpu_runtime_reset_accumulated_memory(handle("reset_accumulated_memory"), index));
  }
  /// Device `index`'s total and free memory; throws UNIMPLEMENTED where the
  /// plugin cannot tell (see `ttpu_runtime_memory_info`).
  MemoryInfo memory_info(int64_t index = 0) const {
    MemoryInfo m{};
    m.struct_size = sizeof(MemoryInfo);
    detail::check(ttpu_runtime_memory_info(handle("memory_info"), index, &m));
    return m;
  }
  /// Device `index`'s default random generator state: (seed, random ops
  /// drawn since). `Generator::default_for` gives a handle to it.
  std::pair<uint64_t, uint64_t> rng_state(int64_t index = 0) const {
    uint64_t seed = 0;
    uint64_t calls = 0;
    detail::check(ttpu_runtime_rng_state(handle("rng_state"), index, &seed, &calls));
    return {seed, calls};
  }
  void set_rng_state(int64_t index, uint64_t seed, uint64_t calls) const {
    detail::check(ttpu_runtime_set_rng_state(handle("set_rng_state"), index, seed, calls));
  }

  /// Flushes every device's pending DEFER_AND_FUSE graph.
  void flush() const { detail::check(ttpu_runtime_flush(handle("flush"))); }
  std::size_t pending_ops(int64_t device = 0) const {
    std::size_t n = 0;
    detail::check(ttpu_runtime_pending_ops(handle("pending_ops"), device, &n));
    return n;
  }
  FusionStats fusion_stats() const {
    FusionStats s{};
    s.struct_size = sizeof(FusionStats);
    detail::check(ttpu_runtime_fusion_stats(handle("fusion_stats"), &s));
    return s;
  }
  /// "fuse_all" (default), "loop_cut", or a plugin's "<plugin>::<policy>[?config]".
  void set_fusion_policy(const std::string& name) const {
    detail::check(ttpu_runtime_set_fusion_policy(handle("set_fusion_policy"), name.c_str()));
  }

  /// A new handle to device `device`'s default stream.
  Stream default_stream(int64_t device = 0) const {
    ttpu_stream_t* out = nullptr;
    detail::check(ttpu_stream_default(handle("default_stream"), device, &out));
    return Stream(out);
  }
  /// Creates a new stream on device `device`.
  Stream create_stream(int64_t device = 0) const {
    ttpu_stream_t* out = nullptr;
    detail::check(ttpu_stream_create(handle("create_stream"), device, &out));
    return Stream(out);
  }
  /// A new handle to the calling thread's current stream on `device`.
  Stream current_stream(int64_t device = 0) const {
    ttpu_stream_t* out = nullptr;
    detail::check(ttpu_stream_current(handle("current_stream"), device, &out));
    return Stream(out);
  }
  /// Makes `stream` current on its device for this thread (the runtime keeps
  /// its own reference). An empty Stream resets every device to its default.
  void set_current_stream(const Stream& stream) const {
    detail::check(ttpu_stream_set_current(handle("set_current_stream"), stream.capi()));
  }

  /// See `Tensor::from_host`.
  template <class T>
  Tensor from_host(const std::vector<T>& data, std::vector<int64_t> shape, int64_t device = 0) const {
    return Tensor::from_host(*this, data, std::move(shape), device);
  }

 private:
  const ttpu_runtime_t* handle(const char* what) const {
    if (h_.get() == nullptr) detail::empty_handle((std::string("Runtime::") + what).c_str());
    return h_.get();
  }
  friend class Tensor;
  detail::Owned<ttpu_runtime_t, ttpu_runtime_destroy> h_;
};

inline Tensor Tensor::from_bytes(const Runtime& rt, const void* data, std::size_t nbytes, DType dtype,
                                 const std::vector<int64_t>& shape, int64_t device) {
  ttpu_tensor_t* out = nullptr;
  const ttpu_runtime_t* r = rt.handle("from_host");
  detail::check(ttpu_tensor_from_host(r, data, nbytes, static_cast<int32_t>(dtype), shape.data(), shape.size(),
                                      device, &out));
  return Tensor(r, out);
}

template <class T>
Tensor Tensor::from_host(const Runtime& rt, const std::vector<T>& data, std::vector<int64_t> shape,
                         int64_t device) {
  return from_bytes(rt, data.data(), data.size() * sizeof(T), dtype_of<T>::value, shape, device);
}

/// Makes a stream current on its device for the guard's scope, then
/// restores the stream that was current on that device before (read with
/// `ttpu_stream_current`). The runtime is borrowed for the guard's life.
class StreamGuard {
 public:
  StreamGuard(const Runtime& rt, const Stream& stream) : rt_(rt), prev_(rt.current_stream(stream.device())) {
    rt_.set_current_stream(stream);
  }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;
  StreamGuard(StreamGuard&&) = delete;
  StreamGuard& operator=(StreamGuard&&) = delete;
  ~StreamGuard() { ttpu_error_destroy(ttpu_stream_set_current(rt_.capi(), prev_.capi())); }

 private:
  const Runtime& rt_;
  Stream prev_;
};

// --------------------------------------------------------------- generator

/// An owned generator handle: the random generator of one device that a
/// random op draws from when it is passed as the op's `generator` argument
/// (`Arg(const Generator&)`), as a `torch.Generator` is. Several handles may
/// name the same generator (`default_for` twice): draws through either
/// advance it. Move-only; the destructor calls `ttpu_generator_destroy`,
/// which frees this handle only. Thread-safe.
class Generator {
 public:
  Generator() noexcept = default;
  /// Takes ownership of `owned`.
  explicit Generator(ttpu_generator_t* owned) noexcept : h_(owned) {}

  /// A new generator for device `device` of `rt`, seeded with `seed` and
  /// independent of the device's default (`torch.Generator("tpu:N")`).
  static Generator create(const Runtime& rt, int64_t device, uint64_t seed) {
    ttpu_generator_t* out = nullptr;
    detail::check(ttpu_generator_create(rt.capi(), device, seed, &out));
    return Generator(out);
  }
  /// A new handle to device `device`'s default generator: the one ops draw
  /// from without a generator, and that `Runtime::manual_seed`,
  /// `rng_state` and `set_rng_state` act on (`torch.tpu.default_generators[N]`).
  static Generator default_for(const Runtime& rt, int64_t device = 0) {
    ttpu_generator_t* out = nullptr;
    detail::check(ttpu_runtime_default_generator(rt.capi(), device, &out));
    return Generator(out);
  }

  ttpu_generator_t* capi() const noexcept { return h_.get(); }
  ttpu_generator_t* release() noexcept { return h_.release(); }
  explicit operator bool() const noexcept { return h_.get() != nullptr; }

  /// The device index, or -1 when empty.
  int64_t device() const noexcept { return ttpu_generator_device(h_.get()); }
  /// Seeds the generator and restarts its draws.
  void manual_seed(uint64_t seed) {
    detail::check(ttpu_generator_manual_seed(handle("Generator::manual_seed"), seed));
  }
  /// The whole state: (seed last set, random draws since).
  std::pair<uint64_t, uint64_t> state() const {
    uint64_t seed = 0;
    uint64_t calls = 0;
    detail::check(ttpu_generator_state(handle("Generator::state"), &seed, &calls));
    return {seed, calls};
  }
  /// The seed last set (`torch.Generator.initial_seed`).
  uint64_t initial_seed() const { return state().first; }
  /// Restores a state read with `state()`: the draws that follow repeat.
  void set_state(uint64_t seed, uint64_t calls) {
    detail::check(ttpu_generator_set_state(handle("Generator::set_state"), seed, calls));
  }
  void set_state(const std::pair<uint64_t, uint64_t>& s) { set_state(s.first, s.second); }
  /// A new, independent generator starting from a copy of this one's state.
  Generator clone_state() const {
    ttpu_generator_t* out = nullptr;
    detail::check(ttpu_generator_clone_state(handle("Generator::clone_state"), &out));
    return Generator(out);
  }

 private:
  const ttpu_generator_t* handle(const char* what) const {
    if (h_.get() == nullptr) detail::empty_handle(what);
    return h_.get();
  }
  detail::Owned<ttpu_generator_t, ttpu_generator_destroy> h_;
};

// ---------------------------------------------------------------- op calls

/// A Python scalar passed as a runtime argument of kind Scalar (a changed
/// value does not recompile): SCALAR_INT, SCALAR_DOUBLE or SCALAR_BOOL.
class Scalar {
 public:
  Scalar(bool v) noexcept : kind_(TTPU_VALUE_KIND_SCALAR_BOOL), i_(v ? 1 : 0) {}  // NOLINT
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) noexcept : kind_(TTPU_VALUE_KIND_SCALAR_INT), i_(static_cast<int64_t>(v)) {}  // NOLINT
  template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) noexcept : kind_(TTPU_VALUE_KIND_SCALAR_DOUBLE), d_(static_cast<double>(v)) {}  // NOLINT

  ttpu_value_t value() const noexcept {
    ttpu_value_t v{};
    v.kind = kind_;
    v.i = i_;
    v.d = d_;
    return v;
  }

 private:
  int32_t kind_;
  int64_t i_ = 0;
  double d_ = 0.0;
};

/// One argument of `call`, converted from a C++ value:
/// - `const Tensor&` → TENSOR (borrowed; it must outlive the call);
/// - `std::optional<Tensor>` / `std::nullopt` → OPTIONAL_TENSOR / NONE;
/// - `std::vector<Tensor>` → TENSOR_LIST, `std::vector<std::optional<Tensor>>`
///   → TENSOR_LIST with NULL entries (`Tensor?[]`);
/// - integers → INT, `bool` → BOOL, `float`/`double` → DOUBLE;
/// - `std::string` / `const char*` / `std::string_view` → STRING (copied);
/// - `std::vector<int64_t>` → INT_LIST (copied);
/// - `Scalar` → SCALAR_*; `DType` → DTYPE;
/// - `const Generator&` → GENERATOR (borrowed; it must outlive the call).
class Arg {
 public:
  Arg(const Tensor& t) : kind_(TTPU_VALUE_KIND_TENSOR), ptr_(t.capi()) {  // NOLINT
    if (ptr_ == nullptr) detail::empty_handle("call: tensor argument");
  }
  Arg(std::nullopt_t) noexcept : kind_(TTPU_VALUE_KIND_NONE) {}  // NOLINT
  Arg(const std::optional<Tensor>& t) noexcept  // NOLINT
      : kind_(TTPU_VALUE_KIND_OPTIONAL_TENSOR), ptr_(t ? t->capi() : nullptr) {}
  Arg(const std::vector<Tensor>& ts) : kind_(TTPU_VALUE_KIND_TENSOR_LIST) {  // NOLINT
    tensors_.reserve(ts.size());
    for (const Tensor& t : ts) {
      if (!t) detail::empty_handle("call: tensor list entry");
      tensors_.push_back(t.capi());
    }
  }
  Arg(const std::vector<std::optional<Tensor>>& ts) : kind_(TTPU_VALUE_KIND_TENSOR_LIST) {  // NOLINT
    tensors_.reserve(ts.size());
    for (const std::optional<Tensor>& t : ts) tensors_.push_back(t ? t->capi() : nullptr);
  }
  Arg(bool b) noexcept : kind_(TTPU_VALUE_KIND_BOOL), i_(b ? 1 : 0) {}  // NOLINT
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Arg(T v) noexcept : kind_(TTPU_VALUE_KIND_INT), i_(static_cast<int64_t>(v)) {}  // NOLINT
  template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Arg(T v) noexcept : kind_(TTPU_VALUE_KIND_DOUBLE), d_(static_cast<double>(v)) {}  // NOLINT
  Arg(const char* s) : kind_(TTPU_VALUE_KIND_STRING), str_(s != nullptr ? s : "") {}  // NOLINT
  Arg(std::string s) : kind_(TTPU_VALUE_KIND_STRING), str_(std::move(s)) {}  // NOLINT
  Arg(std::string_view s) : kind_(TTPU_VALUE_KIND_STRING), str_(s) {}  // NOLINT
  Arg(std::vector<int64_t> ints) : kind_(TTPU_VALUE_KIND_INT_LIST), ints_(std::move(ints)) {}  // NOLINT
  /// A `float[]` argument (API 1.8).
  Arg(std::vector<double> doubles) : kind_(TTPU_VALUE_KIND_DOUBLE_LIST), doubles_(std::move(doubles)) {}  // NOLINT
  Arg(const Scalar& s) noexcept : scalar_(s.value()) {}  // NOLINT
  Arg(DType d) noexcept : kind_(TTPU_VALUE_KIND_DTYPE), i_(static_cast<int64_t>(d)) {}  // NOLINT
  Arg(const Generator& g) : kind_(TTPU_VALUE_KIND_GENERATOR), ptr_(g.capi()) {  // NOLINT
    if (ptr_ == nullptr) detail::empty_handle("call: generator argument");
  }
  /// A pointer (other than `const char*`) is not an argument: without this,
  /// it would silently convert to bool.
  template <class T>
  Arg(T*) = delete;

  /// The C value; pointers borrow this Arg (and the tensors it names).
  ttpu_value_t value() const noexcept {
    if (scalar_) return *scalar_;
    ttpu_value_t v{};
    v.kind = kind_;
    v.i = i_;
    v.d = d_;
    switch (kind_) {
      case TTPU_VALUE_KIND_TENSOR:
      case TTPU_VALUE_KIND_OPTIONAL_TENSOR:
      case TTPU_VALUE_KIND_GENERATOR:
        v.ptr = ptr_;
        break;
      case TTPU_VALUE_KIND_TENSOR_LIST:
        v.ptr = tensors_.data();
        v.len = tensors_.size();
        break;
      case TTPU_VALUE_KIND_STRING:
        v.ptr = str_.data();
        v.len = str_.size();
        break;
      case TTPU_VALUE_KIND_INT_LIST:
        v.ptr = ints_.data();
        v.len = ints_.size();
        break;
      case TTPU_VALUE_KIND_DOUBLE_LIST:
        v.ptr = doubles_.data();
        v.len = doubles_.size();
        break;
      default:
        break;
    }
    return v;
  }

 private:
  int32_t kind_ = TTPU_VALUE_KIND_NONE;
  int64_t i_ = 0;
  double d_ = 0.0;
  const void* ptr_ = nullptr;
  std::string str_;
  std::vector<int64_t> ints_;
  std::vector<double> doubles_;
  std::vector<const ttpu_tensor_t*> tensors_;
  std::optional<ttpu_value_t> scalar_;
};

/// Whether the runtime runs the op that aten declaration `decl` declares,
/// with exactly those arguments (see `ttpu_op_declare`): an out= form whose
/// name does not say so (`aten::max.dim_max(...)`) is derived from the
/// functional op that takes its inputs.
inline bool op_declare(const std::string& decl) {
  bool supported = false;
  detail::check(ttpu_op_declare(decl.c_str(), &supported));
  return supported;
}

/// The most results one `call` accepts (a `Tensor[]` result counts each
/// element); an op returning more fails with RESOURCE_EXHAUSTED.
inline constexpr std::size_t kMaxResults = 256;

/// Calls op `name` (e.g. "aten::add.Tensor") with `args[0..n]` through
/// `runtime` (borrowed). Returns one Tensor per result, each owning a new
/// handle; a None result is an empty Tensor. Throws `Error`.
inline std::vector<Tensor> call_args(const ttpu_runtime_t* runtime, const char* name, const Arg* args,
                                     std::size_t n) {
  std::vector<ttpu_value_t> values(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = args[i].value();
  std::vector<ttpu_value_t> outs(kMaxResults);
  std::size_t count = 0;
  detail::check(ttpu_op_call(runtime, name, values.data(), n, outs.data(), outs.size(), &count));
  auto handle_of = [&outs](std::size_t i) {
    return outs[i].kind == TTPU_VALUE_KIND_TENSOR ? static_cast<ttpu_tensor_t*>(const_cast<void*>(outs[i].ptr))
                                                  : nullptr;
  };
  std::vector<Tensor> result;
  try {
    result.reserve(count);
  } catch (...) {
    for (std::size_t i = 0; i < count; ++i) ttpu_tensor_destroy(handle_of(i));
    throw;
  }
  for (std::size_t i = 0; i < count; ++i) result.emplace_back(runtime, handle_of(i));  // reserved: no throw
  return result;
}

/// `call(rt, "aten::add.Tensor", {a, b})`.
inline std::vector<Tensor> call(const Runtime& rt, const char* name, std::initializer_list<Arg> args) {
  if (!rt) detail::empty_handle("call: runtime");
  return call_args(rt.capi(), name, args.begin(), args.size());
}

/// `call(rt, "aten::add.Tensor", args)` with a vector built at run time.
inline std::vector<Tensor> call(const Runtime& rt, const char* name, const std::vector<Arg>& args) {
  if (!rt) detail::empty_handle("call: runtime");
  return call_args(rt.capi(), name, args.data(), args.size());
}

namespace detail {
/// Whether a pack is one `std::vector<Arg>` (which the non-template
/// overload takes, whatever its constness).
template <class... A>
struct is_arg_vector : std::false_type {};
template <class A>
struct is_arg_vector<A> : std::is_same<std::decay_t<A>, std::vector<Arg>> {};
}  // namespace detail

/// `call(rt, "aten::add.Tensor", a, b)`: each argument converts to `Arg`.
template <class... A, std::enable_if_t<!detail::is_arg_vector<A...>::value, int> = 0>
std::vector<Tensor> call(const Runtime& rt, const char* name, A&&... args) {
  if (!rt) detail::empty_handle("call: runtime");
  const std::array<Arg, sizeof...(A)> a{{Arg(std::forward<A>(args))...}};
  return call_args(rt.capi(), name, a.data(), a.size());
}

namespace detail {
inline Tensor single(std::vector<Tensor> r, const char* name) {
  if (r.size() != 1 || !r[0]) {
    throw Error(TTPU_CODE_INVALID_ARGUMENT, std::string("torchtpu::call1: ") + name + " returned " +
                                                std::to_string(r.size()) + " values, not one tensor");
  }
  return std::move(r[0]);
}
}  // namespace detail

/// Like `call`, for an op returning exactly one tensor.
inline Tensor call1(const Runtime& rt, const char* name, std::initializer_list<Arg> args) {
  return detail::single(call(rt, name, args), name);
}
inline Tensor call1(const Runtime& rt, const char* name, const std::vector<Arg>& args) {
  return detail::single(call(rt, name, args), name);
}
template <class... A, std::enable_if_t<!detail::is_arg_vector<A...>::value, int> = 0>
Tensor call1(const Runtime& rt, const char* name, A&&... args) {
  return detail::single(call(rt, name, std::forward<A>(args)...), name);
}

namespace detail {
/// `call1` through the runtime a tensor remembers (for the operators).
template <class... A>
Tensor call_on(const Tensor& t, const char* name, A&&... args) {
  if (!t) empty_handle(name);
  const std::array<Arg, sizeof...(A)> a{{Arg(std::forward<A>(args))...}};
  return single(call_args(t.runtime(), name, a.data(), a.size()), name);
}
}  // namespace detail

// --------------------------------------------------------------- operators
// Each goes through the op call of the left tensor's runtime.

inline Tensor operator+(const Tensor& a, const Tensor& b) { return detail::call_on(a, "aten::add.Tensor", a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return detail::call_on(a, "aten::sub.Tensor", a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return detail::call_on(a, "aten::mul.Tensor", a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return detail::call_on(a, "aten::div.Tensor", a, b); }
inline Tensor operator+(const Tensor& a, double b) { return detail::call_on(a, "aten::add.Scalar", a, Scalar(b)); }
inline Tensor operator-(const Tensor& a, double b) { return detail::call_on(a, "aten::sub.Scalar", a, Scalar(b)); }
inline Tensor operator*(const Tensor& a, double b) { return detail::call_on(a, "aten::mul.Scalar", a, Scalar(b)); }
inline Tensor operator/(const Tensor& a, double b) { return detail::call_on(a, "aten::div.Scalar", a, Scalar(b)); }
inline Tensor operator+(double a, const Tensor& b) { return b + a; }
inline Tensor operator*(double a, const Tensor& b) { return b * a; }
inline Tensor operator-(const Tensor& a) { return detail::call_on(a, "aten::neg", a); }

/// `torch.matmul(a, b)`.
inline Tensor matmul(const Tensor& a, const Tensor& b) { return detail::call_on(a, "aten::matmul", a, b); }
/// `torch.relu(x)`.
inline Tensor relu(const Tensor& x) { return detail::call_on(x, "aten::relu", x); }
/// `torch.nn.functional.linear(x, w)`: x @ w.T.
inline Tensor linear(const Tensor& x, const Tensor& w) { return detail::call_on(x, "aten::linear", x, w); }
/// `torch.nn.functional.linear(x, w, bias)`: x @ w.T + bias.
inline Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  return detail::call_on(x, "aten::linear", x, w, bias);
}

// ----------------------------------------------------------------- plugins
// WebAssembly plugins are process-wide: once loaded, their ops are called
// with `call(rt, "<plugin>::<op>", ...)` on any runtime, and their fusion
// policies are selected with `Runtime::set_fusion_policy("<plugin>::<policy>")`.
// Plugins in `$TORCHTPU_PLUGIN_PATH` load with the first runtime.

/// One op of a plugin.
struct PluginOp {
  std::string name;      ///< "rms_norm::rms_norm", as `call` takes it
  std::string schema;    ///< its aten-style declaration
  std::string backward;  ///< the op computing its gradients, or empty
};

/// A loaded plugin, as `plugins()` lists it.
struct Plugin {
  std::string name, version, path;
  uint32_t abi_major = 0, abi_minor = 0;
  std::vector<PluginOp> ops;
  std::vector<std::string> policies;
  /// Calls into the module, failed calls, and lowerings served from the
  /// checked-fragment cache or asked of the plugin.
  uint64_t calls = 0, failures = 0, lowering_hits = 0, lowering_misses = 0;
};

/// Loads a `.wasm` plugin, or every `.wasm` in a directory. Throws `Error`
/// naming every rejected file; the others stay loaded.
inline void load_plugins(const std::string& path) { detail::check(ttpu_plugin_load(path.c_str())); }

/// Every loaded plugin, in load order.
inline std::vector<Plugin> plugins() {
  std::vector<Plugin> out;
  const std::size_t n = ttpu_plugin_count();
  for (std::size_t i = 0; i < n; ++i) {
    ttpu_plugin_info_t info{};
    info.struct_size = sizeof info;
    detail::check(ttpu_plugin_info(i, &info));
    Plugin p;
    p.name = info.name;
    p.version = info.version;
    p.path = info.path;
    p.abi_major = info.abi_major;
    p.abi_minor = info.abi_minor;
    p.calls = info.calls;
    p.failures = info.failures;
    p.lowering_hits = info.lowering_hits;
    p.lowering_misses = info.lowering_misses;
    for (std::size_t j = 0; j < info.num_ops; ++j) {
      ttpu_plugin_op_t op{};
      op.struct_size = sizeof op;
      detail::check(ttpu_plugin_op(i, j, &op));
      p.ops.push_back({op.name, op.schema, detail::str_or_empty(op.backward)});
    }
    for (std::size_t j = 0; j < info.num_policies; ++j) {
      const char* name = nullptr;
      detail::check(ttpu_plugin_policy_name(i, j, &name));
      p.policies.emplace_back(name);
    }
    out.push_back(std::move(p));
  }
  return out;
}

// ------------------------------------------------------------- collectives

/// How `all_reduce` and `reduce_scatter` combine values.
enum class ReduceOp : int32_t {
  Sum = TTPU_REDUCE_OP_SUM,
  Avg = TTPU_REDUCE_OP_AVG,  ///< floating-point dtypes only
  Max = TTPU_REDUCE_OP_MAX,
  Min = TTPU_REDUCE_OP_MIN,
  Prod = TTPU_REDUCE_OP_PROD,
};

namespace detail {

/// Runs `c` over `inputs` (rank r = the device of `inputs[r]`, all through
/// the runtime of `inputs[0]`); one output per input, on its device. A
/// non-empty `group` (PJRT global device ids in rank order) is a group that
/// spans processes, `inputs` being this process's members.
inline std::vector<Tensor> collective(const std::vector<Tensor>& inputs, ttpu_collective_t c, const char* what,
                                      const std::vector<int64_t>& group = {}) {
  if (inputs.empty()) throw Error(TTPU_CODE_INVALID_ARGUMENT, std::string("torchtpu::") + what + ": no input tensors");
  std::vector<const ttpu_tensor_t*> in;
  in.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    if (!t) empty_handle(what);
    in.push_back(t.capi());
  }
  std::vector<ttpu_tensor_t*> out(inputs.size(), nullptr);
  const ttpu_runtime_t* rt = inputs[0].runtime();
  check(group.empty() ? ttpu_collective_run(rt, &c, in.data(), in.size(), out.data())
                      : ttpu_collective_run_in_group(rt, &c, group.data(), group.size(), in.data(), in.size(),
                                                     out.data()));
  std::vector<Tensor> result;
  result.reserve(out.size());
  for (ttpu_tensor_t* h : out) result.emplace_back(rt, h);
  return result;
}

inline ttpu_collective_t collective_of(ttpu_collective_kind kind) {
  ttpu_collective_t c{};
  c.struct_size = sizeof c;
  c.kind = kind;
  return c;
}

}  // namespace detail

/// Collectives across devices of one runtime. Each takes one tensor per
/// participating device (rank r = the device of `inputs[r]`; one dtype and
/// shape) and returns one new tensor per input, on the same device. Each is
/// one cached program, a flush point in fused mode, and runs on each
/// device's current stream (use a `StreamGuard` to overlap it with compute).

/// Every rank gets the reduction of all inputs.
inline std::vector<Tensor> all_reduce(const std::vector<Tensor>& inputs, ReduceOp op = ReduceOp::Sum) {
  ttpu_collective_t c = detail::collective_of(TTPU_COLLECTIVE_KIND_ALL_REDUCE);
  c.reduce_op = static_cast<int32_t>(op);
  return detail::collective(inputs, c, "all_reduce");
}
/// Every rank gets all inputs concatenated along dim 0.
inline std::vector<Tensor> all_gather(const std::vector<Tensor>& inputs) {
  return detail::collective(inputs, detail::collective_of(TTPU_COLLECTIVE_KIND_ALL_GATHER), "all_gather");
}
/// The reduction split along dim 0: rank r gets chunk r.
inline std::vector<Tensor> reduce_scatter(const std::vector<Tensor>& inputs, ReduceOp op = ReduceOp::Sum) {
  ttpu_collective_t c = detail::collective_of(TTPU_COLLECTIVE_KIND_REDUCE_SCATTER);
  c.reduce_op = static_cast<int32_t>(op);
  return detail::collective(inputs, c, "reduce_scatter");
}
/// Every rank gets rank `root`'s input, bit for bit.
inline std::vector<Tensor> broadcast(const std::vector<Tensor>& inputs, int64_t root) {
  ttpu_collective_t c = detail::collective_of(TTPU_COLLECTIVE_KIND_BROADCAST);
  c.root = root;
  return detail::collective(inputs, c, "broadcast");
}
/// Chunk j (along dim 0) of rank i becomes chunk i of rank j.
inline std::vector<Tensor> all_to_all(const std::vector<Tensor>& inputs) {
  return detail::collective(inputs, detail::collective_of(TTPU_COLLECTIVE_KIND_ALL_TO_ALL), "all_to_all");
}
/// Send/recv: each (source, target) pair moves the source rank's input to
/// the target rank; ranks that receive nothing get zeros.
inline std::vector<Tensor> permute(const std::vector<Tensor>& inputs,
                                   const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  std::vector<int64_t> flat;
  flat.reserve(2 * pairs.size());
  for (const auto& [source, target] : pairs) {
    flat.push_back(source);
    flat.push_back(target);
  }
  ttpu_collective_t c = detail::collective_of(TTPU_COLLECTIVE_KIND_PERMUTE);
  c.pairs = flat.data();
  c.num_pairs = pairs.size();
  return detail::collective(inputs, c, "permute");
}
/// Returns once every device of `devices` has finished the work queued
/// before it on its current stream.
inline void barrier(const Runtime& rt, const std::vector<int64_t>& devices) {
  if (!rt) detail::empty_handle("barrier: runtime");
  detail::check(ttpu_collective_barrier(rt.capi(), devices.data(), devices.size()));
}

// ----------------------------------------------------------------- version

/// The library version ("0.1.0").
inline std::string version() { return detail::str_or_empty(ttpu_version()); }
/// The C ABI version of the loaded library (`major * 1000 + minor`).
inline uint32_t api_version() noexcept { return ttpu_api_version(); }
/// The C ABI version of this header.
inline constexpr uint32_t header_api_version = TTPU_API_MAJOR * 1000 + TTPU_API_MINOR;

}  // namespace torchtpu
