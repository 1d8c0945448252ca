// Runtime, storage, allocator, device guard (streams and events) and hooks of
// the PyTorch "tpu" device. Every call into the runtime goes through the C ABI
// via the header-only C++ wrapper.
#include "tpu.h"


#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <c10/util/strides.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

namespace torchtpu_ext {

// ------------------------------------------------------------------ runtime

namespace {
// What the runtime starts with, settable until it starts (start_mu).
std::mutex start_mu;
bool started = false;
std::optional<torchtpu::Distributed> start_distributed;
c10::DeviceIndex start_default_device = -1;
std::atomic<c10::DeviceIndex> default_device{0};
}  // namespace

const torchtpu::Runtime& runtime() {
  static const torchtpu::Runtime* rt = [] {
    std::optional<torchtpu::Distributed> distributed;
    c10::DeviceIndex first_device = -1;
    {
      std::lock_guard<std::mutex> lock(start_mu);
      started = true;
      distributed = start_distributed;
      first_device = start_default_device;
    }
    try {
      auto* r = new torchtpu::Runtime(std::string(), 0, distributed.value_or(torchtpu::Distributed()));
      const auto n = static_cast<c10::DeviceIndex>(r->device_count());
      if (first_device >= 0 && n > 0) default_device.store(static_cast<c10::DeviceIndex>(first_device % n));
      return r;
    } catch (const torchtpu::Error& e) {
      if (!distributed) rethrow(e);
      rethrow(torchtpu::Error(
          e.code(), std::string(e.what()) + "\n(the PJRT client was created as node " +
                        std::to_string(distributed->node_id) + " of " + std::to_string(distributed->num_nodes) +
                        " for torch.distributed; TORCHTPU_PJRT_JOIN=0 creates it for this process alone)"));
    }
  }();
  return *rt;
}

bool join_processes(torchtpu::Distributed distributed) {
  std::lock_guard<std::mutex> lock(start_mu);
  if (started) return false;
  start_distributed = std::move(distributed);
  return true;
}

std::optional<std::pair<int, int>> joined_node() {
  std::lock_guard<std::mutex> lock(start_mu);
  if (!started || !start_distributed) return std::nullopt;
  return std::make_pair(start_distributed->node_id, start_distributed->num_nodes);
}

bool runtime_started() noexcept {
  std::lock_guard<std::mutex> lock(start_mu);
  return started;
}

bool set_first_default_device(c10::DeviceIndex index) {
  std::lock_guard<std::mutex> lock(start_mu);
  if (started) return false;
  start_default_device = index;
  return true;
}

c10::DeviceIndex device_count() noexcept {
  static const c10::DeviceIndex n = [] {
    try {
      return static_cast<c10::DeviceIndex>(runtime().device_count());
    } catch (...) {
      return static_cast<c10::DeviceIndex>(0);
    }
  }();
  return n;
}

namespace {
// -1: this thread never called set_device, so it uses `default_device`.
thread_local c10::DeviceIndex tls_device = -1;
}  // namespace

c10::DeviceIndex current_device() noexcept {
  if (tls_device >= 0) return tls_device;
  device_count();  // starts the runtime, which settles the default device
  return default_device.load();
}

void set_current_device(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < device_count(), "invalid tpu device index ", static_cast<int>(index), ": ",
              static_cast<int>(device_count()), " tpu devices are available");
  tls_device = index;
}

void rethrow(const torchtpu::Error& e) {
  switch (e.code()) {
    case TTPU_CODE_UNIMPLEMENTED:
      TORCH_CHECK_NOT_IMPLEMENTED(false, e.what());
    case TTPU_CODE_OUT_OF_RANGE:
      TORCH_CHECK_INDEX(false, e.what());
    default:
      TORCH_CHECK(false, e.what());
  }
}

// ------------------------------------------------------------------ storage

namespace {

// The live storages by their fake address. PyTorch paths that rebuild a
// storage from a data pointer alone (legacy serialization writes a storage
// through `at::from_blob(storage.data(), ..., device)`) reach a storage of
// ours through a DataPtr of theirs; the address finds it.
class StorageRegistry {
 public:
  void add(const void* address, TpuStorage* s) {
    std::lock_guard<std::mutex> lock(mu_);
    by_address_.emplace(reinterpret_cast<uintptr_t>(address), s);
  }
  void remove(const void* address) {
    std::lock_guard<std::mutex> lock(mu_);
    by_address_.erase(reinterpret_cast<uintptr_t>(address));
  }
  // The storage whose bytes hold `address`, and the byte offset of `address`
  // in it; null when no live storage does.
  std::pair<TpuStorage*, size_t> find(const void* address) const {
    const auto a = reinterpret_cast<uintptr_t>(address);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_address_.upper_bound(a);
    if (it == by_address_.begin()) return {nullptr, 0};
    --it;
    const size_t offset = a - it->first;
    if (offset != 0 && offset >= it->second->nbytes) return {nullptr, 0};
    return {it->second, offset};
  }

 private:
  mutable std::mutex mu_;
  std::map<uintptr_t, TpuStorage*> by_address_;
};

StorageRegistry& registry() {
  static auto* r = new StorageRegistry();  // outlives every storage
  return *r;
}

void delete_storage(void* ctx) {
  auto* s = static_cast<TpuStorage*>(ctx);
  registry().remove(s->address);
  delete s;
}

// Data pointers are unique, non-overlapping and never dereferenced: PyTorch
// compares them (aliasing and overlap checks), the runtime holds the memory.
// They lie in a range no host allocation uses, so a stray read faults at once.
void* fake_address(size_t nbytes) {
  static std::atomic<uintptr_t> next{uintptr_t{0x7a0000000000}};
  const uintptr_t span = ((nbytes + 255) / 256 + 1) * 256;
  return reinterpret_cast<void*>(next.fetch_add(span));
}

c10::DataPtr make_data_ptr(TpuStorage* s) {
  s->address = fake_address(s->nbytes);
  registry().add(s->address, s);
  return c10::DataPtr(s->address, s, &delete_storage, c10::Device(c10::DeviceType::PrivateUse1, s->device));
}

// A c10::DeviceAllocator, so that torch.accelerator's memory functions
// work. There is no caching layer: device memory is the runtime's PJRT
// buffers, allocated when a storage is first written and returned to PJRT
// when its last user drops it. The statistics are the runtime's own
// accounting of those buffers (`ttpu_runtime_memory_stats`).
struct TpuAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    auto* s = new TpuStorage();
    s->nbytes = nbytes;
    s->device = current_device();
    return make_data_ptr(s);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &delete_storage; }
  void copy_data(void*, const void*, std::size_t) const override {
    TORCH_CHECK(false, "tpu storages cannot be copied byte-wise on the host; use Tensor.copy_ or .to()");
  }

  // As CUDA's allocator before its first use: until the runtime starts
  // there is no device memory, and asking for statistics must not start it
  // (a runtime that joins torch.distributed starts after
  // init_process_group).
  bool initialized() override { return runtime_started(); }
  // Nothing is cached: a freed buffer goes back to PJRT at once.
  void emptyCache(c10::MempoolId_t) override {}
  // Nothing to record: memory is never handed from one tensor to another
  // here, and PJRT keeps a dropped buffer's memory until the programs
  // already launched with it (on any stream) have finished.
  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    const torchtpu::MemoryStats m = checked([&] { return runtime().memory_stats(index(device)); });
    c10::CachingDeviceAllocator::DeviceStats st;
    const auto set = [](c10::CachingAllocator::StatArray& a, int64_t current, int64_t peak, int64_t allocated,
                        int64_t freed) {
      auto& all = a[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
      all.current = current;
      all.peak = peak;
      all.allocated = allocated;
      all.freed = freed;
    };
    // Each buffer is one PJRT allocation of exactly the bytes asked for,
    // active while it lives: allocations, segments and active blocks are
    // the same thing here, and so are allocated, reserved, active and
    // requested bytes. No pools (the small/large entries stay 0) and no
    // split blocks.
    for (auto* a : {&st.allocation, &st.segment, &st.active}) {
      set(*a, m.live_buffers, m.peak_buffers, m.allocated_buffers, m.freed_buffers);
    }
    for (auto* a : {&st.allocated_bytes, &st.reserved_bytes, &st.active_bytes, &st.requested_bytes}) {
      set(*a, m.live_bytes, m.peak_bytes, m.allocated_bytes, m.freed_bytes);
    }
    st.num_ooms = m.num_ooms;
    st.num_device_alloc = m.allocated_buffers;
    st.num_device_free = m.freed_buffers;
    return st;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    checked([&] { runtime().reset_accumulated_memory(index(device)); });
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    checked([&] { runtime().reset_peak_memory(index(device)); });
  }
  // (free, total) bytes: see `ttpu_runtime_memory_info` for their source.
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    const torchtpu::MemoryInfo m = checked([&] { return runtime().memory_info(index(device)); });
    return {static_cast<size_t>(m.free_bytes), static_cast<size_t>(m.total_bytes)};
  }

 private:
  static int64_t index(c10::DeviceIndex d) { return d >= 0 ? d : current_device(); }
};

TpuAllocator the_allocator;

}  // namespace

c10::Allocator* allocator() { return &the_allocator; }

bool owns_storage(const c10::Storage& storage) { return storage.data_ptr().get_deleter() == &delete_storage; }

StorageRef storage_ref(const c10::Storage& storage) {
  const c10::DataPtr& dp = storage.data_ptr();
  if (dp.get_deleter() == &delete_storage) return {static_cast<TpuStorage*>(dp.get_context()), 0};
  const auto [s, offset] = registry().find(dp.get());
  TORCH_CHECK(s != nullptr, "tpu storage at ", dp.get(), " (", storage.nbytes(), " bytes) is not a live torchtpu "
              "storage: it was created by another allocator, or its torchtpu storage was freed");
  TORCH_CHECK(offset + storage.nbytes() <= s->nbytes, "tpu storage at ", dp.get(), " (", storage.nbytes(),
              " bytes) overruns the torchtpu storage it points into (", s->nbytes, " bytes from ", s->address, ")");
  return {s, offset};
}

TpuStorage* storage_of(const c10::Storage& storage) { return storage_ref(storage).storage; }

TpuStorage* storage_of(const at::Tensor& t) {
  TORCH_CHECK(t.defined() && t.device().is_privateuseone(), "expected a tpu tensor");
  return storage_of(t.storage());
}

namespace {

// The offset of `t` in elements of its TpuStorage (a from_blob storage may
// start inside ours).
int64_t element_offset(const at::Tensor& t, const StorageRef& ref) {
  TORCH_CHECK(ref.byte_offset % t.element_size() == 0, "a ", t.scalar_type(), " tensor cannot view a tpu storage at ",
              "byte offset ", ref.byte_offset);
  return t.storage_offset() + static_cast<int64_t>(ref.byte_offset / t.element_size());
}

// Whether `real` is the type of complex dtype `complex`'s parts.
bool parts_of(torchtpu::DType complex, torchtpu::DType real) {
  return (complex == torchtpu::DType::Complex64 && real == torchtpu::DType::Float32) ||
         (complex == torchtpu::DType::Complex128 && real == torchtpu::DType::Float64);
}

// Makes `s->base` hold the storage as `t`'s dtype. Needs `s->mu`.
void ready_base(TpuStorage* s, const at::Tensor& t) {
  const auto dtype = static_cast<torchtpu::DType>(t.scalar_type());
  if (!s->base) {
    const int64_t numel = static_cast<int64_t>(s->nbytes / t.element_size());
    s->base = torchtpu::call1(runtime(), "aten::full", std::vector<int64_t>{numel}, torchtpu::Scalar(0), dtype,
                              std::nullopt, static_cast<int64_t>(s->device));
  } else if (s->base.dtype() != dtype && parts_of(s->base.dtype(), dtype)) {
    // A complex storage read as its parts (view_as_real), or parts read as
    // complex (view_as_complex): the same bytes, retyped on the device.
    s->base = torchtpu::call1(runtime(), "aten::view_as_real_copy", s->base).view({2 * s->base.numel()}, {1}, 0);
  } else if (s->base.dtype() != dtype && parts_of(dtype, s->base.dtype()) && s->base.numel() % 2 == 0) {
    const int64_t n = s->base.numel();
    s->base = torchtpu::call1(runtime(), "aten::view_as_complex_copy", s->base.view({n / 2, 2}, {2, 1}, 0));
  } else if (s->base.dtype() != dtype) {
    // The storage is read as another dtype (serialization reads and
    // writes storages as bytes; Tensor.view(dtype)). Runtime storages are
    // typed, so its bytes are retyped through the host: correct, but a
    // transfer each time the dtype a storage is read with changes.
    TORCH_CHECK(s->nbytes % t.element_size() == 0, "a tpu storage of ", s->nbytes, " bytes cannot be read as ",
                t.scalar_type());
    const std::vector<uint8_t> bytes = s->base.to_bytes();
    const int64_t numel = static_cast<int64_t>(s->nbytes / t.element_size());
    s->base = torchtpu::Tensor::from_bytes(runtime(), bytes.data(), bytes.size(), dtype, {numel}, s->device);
  }
}

}  // namespace

namespace {

// Runs `f(base, offset)` on `t`'s storage handle, ready to be read as `t`'s
// dtype, and `t`'s offset in it, under the storage's lock.
template <class F>
auto with_base(const at::Tensor& t, F&& f) {
  TORCH_CHECK(t.defined() && t.device().is_privateuseone(), "expected a tpu tensor");
  const StorageRef ref = storage_ref(t.storage());
  const int64_t offset = element_offset(t, ref);
  return checked([&] {
    std::lock_guard<std::mutex> lock(ref.storage->mu);
    ready_base(ref.storage, t);
    return f(ref.storage->base, offset);
  });
}

}  // namespace

torchtpu::Tensor handle_of(const at::Tensor& t) {
  return with_base(t, [&](const torchtpu::Tensor& base, int64_t offset) {
    return base.view(t.sizes().vec(), t.strides().vec(), offset);
  });
}

StorageView storage_view(const at::Tensor& t) {
  return with_base(t, [](const torchtpu::Tensor& base, int64_t offset) { return StorageView{base.capi(), offset}; });
}

bool download_as_bytes(const at::Tensor& t, void* out) {
  if (t.scalar_type() != at::kByte || !t.is_contiguous()) return false;
  const StorageRef ref = storage_ref(t.storage());
  torchtpu::Tensor base;
  {
    std::lock_guard<std::mutex> lock(ref.storage->mu);
    if (!ref.storage->base || ref.storage->base.dtype() == torchtpu::DType::UInt8) return false;
    base = ref.storage->base.retain();
  }
  try {
    const size_t start = ref.byte_offset + static_cast<size_t>(t.storage_offset());
    const size_t n = static_cast<size_t>(t.numel());
    if (start == 0 && n == ref.storage->nbytes) {
      torchtpu::detail::check(ttpu_tensor_to_host(runtime().capi(), base.capi(), out, n));
    } else {
      const std::vector<uint8_t> bytes = base.to_bytes();
      std::memcpy(out, bytes.data() + start, n);
    }
  } catch (const torchtpu::Error& e) {
    rethrow(e);
  }
  return true;
}

namespace {

// A tpu tensor over a new storage whose runtime handle is `whole` (viewing
// all of it), with the given geometry.
at::Tensor tensor_over(torchtpu::Tensor whole, int64_t storage_numel, c10::ScalarType st, int64_t device,
                       c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset) {
  auto* s = new TpuStorage();
  s->nbytes = static_cast<size_t>(storage_numel) * c10::elementSize(st);
  s->device = static_cast<c10::DeviceIndex>(device);
  s->base = std::move(whole);
  c10::Storage storage(c10::Storage::use_byte_size_t(), s->nbytes, make_data_ptr(s), allocator(), true);
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), c10::scalarTypeToTypeMeta(st));
  t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, offset);
  return t;
}

}  // namespace

at::Tensor wrap(torchtpu::Tensor r) {
  return checked([&] {
    const int64_t numel = r.storage_numel();
    const std::vector<int64_t> sizes = r.shape(), strides = r.strides();
    return tensor_over(r.view({numel}, {1}, 0), numel, static_cast<c10::ScalarType>(r.dtype()), r.device(), sizes,
                       strides, r.offset());
  });
}

at::Tensor wrap(const ttpu_result_t& r, torchtpu::Tensor handle) {
  return checked([&] {
    const c10::IntArrayRef sizes(r.sizes, r.ndim), strides(r.strides, r.ndim);
    // A new result usually is its whole storage, densely: its handle then
    // serves as the storage's (no second handle).
    const bool whole = r.offset == 0 && c10::multiply_integers(sizes) == r.storage_numel &&
                       c10::IntArrayRef(c10::contiguous_strides(sizes)) == strides;
    const std::vector<int64_t> sz = sizes.vec(), st = strides.vec();
    torchtpu::Tensor base = whole ? std::move(handle) : handle.view({r.storage_numel}, {1}, 0);
    return tensor_over(std::move(base), r.storage_numel, static_cast<c10::ScalarType>(r.dtype), r.device, sz, st,
                       r.offset);
  });
}

bool covers_storage(const at::Tensor& t) {
  // A storage of another allocator may see only part of ours.
  return owns_storage(t.storage()) && t.storage_offset() == 0 && t.is_contiguous() &&
         static_cast<size_t>(t.numel()) * t.element_size() == t.storage().nbytes();
}

void write_into(const at::Tensor& dst, torchtpu::Tensor value, bool fresh) {
  try {
    TpuStorage* s = storage_of(dst);
    const auto dtype = static_cast<torchtpu::DType>(dst.scalar_type());
    if (fresh && covers_storage(dst) && value.dtype() == dtype && value.shape() == dst.sizes().vec() &&
        value.device() == s->device) {
      // The new value replaces the storage's: no copy, no program.
      if (value.offset() != 0 || value.storage_numel() != value.numel() ||
          value.strides() != dst.strides().vec()) {
        value = torchtpu::call1(runtime(), "aten::clone", value, std::nullopt);
      }
      std::lock_guard<std::mutex> lock(s->mu);
      s->base = value.view({value.numel()}, {1}, 0);
      return;
    }
    torchtpu::Tensor view = handle_of(dst);
    torchtpu::call(runtime(), "aten::copy_", view, value, false);
  } catch (const torchtpu::Error& e) {
    rethrow(e);
  }
}

void adopt(const at::Tensor& dst, torchtpu::Tensor r) {
  TpuStorage* s = storage_of(dst);
  bool same = false;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    same = s->base && r.same_storage(s->base);
  }
  c10::TensorImpl* impl = dst.unsafeGetTensorImpl();
  if (same) {
    if (r.shape() != dst.sizes().vec()) impl->set_sizes_contiguous(r.shape());
    return;
  }
  const int64_t numel = r.storage_numel();
  const int64_t offset = r.offset();
  const std::vector<int64_t> sizes = r.shape(), strides = r.strides();
  replace_storage(dst.storage().unsafeGetStorageImpl(), static_cast<size_t>(numel) * dst.element_size(),
                  static_cast<c10::DeviceIndex>(r.device()), r.view({numel}, {1}, 0));
  impl->set_sizes_and_strides(sizes, strides, offset);
}

void replace_storage(c10::StorageImpl* impl, size_t nbytes, c10::DeviceIndex device, torchtpu::Tensor base) {
  auto* s = new TpuStorage();
  s->nbytes = nbytes;
  s->device = device;
  s->base = std::move(base);
  impl->set_data_ptr_noswap(make_data_ptr(s));
  impl->set_nbytes(nbytes);
}

bool materialized(const at::Tensor& t) {
  TpuStorage* s = storage_of(t);
  std::lock_guard<std::mutex> lock(s->mu);
  return static_cast<bool>(s->base);
}

torchtpu::Tensor upload(const at::Tensor& src, c10::DeviceIndex device) {
  if (src.device().is_privateuseone()) return handle_of(src);
  TORCH_CHECK(src.device().is_cpu(), "cannot copy a ", src.device(), " tensor to tpu");
  const at::Tensor dense = src.contiguous();
  ttpu_tensor_t* out = nullptr;
  const std::vector<int64_t> sizes = dense.sizes().vec();
  torchtpu::detail::check(ttpu_tensor_from_host(runtime().capi(), dense.data_ptr(), dense.nbytes(),
                                                static_cast<int32_t>(dense.scalar_type()), sizes.data(),
                                                sizes.size(), device, &out));
  return torchtpu::Tensor(runtime().capi(), out);
}

// ---------------------------------------------------------- streams/events

namespace {

// The runtime streams PyTorch has seen, by c10 stream id (the runtime's id).
class StreamTable {
 public:
  const torchtpu::Stream& get(const c10::Stream& s) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(key(s));
    if (it != streams_.end()) return it->second;
    TORCH_CHECK(s.id() == 0, "unknown tpu stream id ", s.id(), " on ", s.device());
    return streams_.emplace(key(s), runtime().default_stream(s.device_index())).first->second;
  }
  c10::Stream add(torchtpu::Stream st) {
    const c10::Stream s(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, st.device()), st.id());
    std::lock_guard<std::mutex> lock(mu_);
    streams_.emplace(key(s), std::move(st));
    return s;
  }

 private:
  static std::pair<int, int64_t> key(const c10::Stream& s) { return {s.device_index(), s.id()}; }
  std::mutex mu_;
  std::map<std::pair<int, int64_t>, torchtpu::Stream> streams_;
};

StreamTable& streams() {
  static auto* t = new StreamTable();
  return *t;
}

struct TpuGuardImpl final : c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override { return kType; }
  c10::Device exchangeDevice(c10::Device d) const override {
    const c10::Device old = getDevice();
    if (d.index() != old.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kType, current_device()); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kType, "expected a tpu device, got ", d);
    if (d.index() >= 0) set_current_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < device_count()) tls_device = d.index();
  }
  c10::Stream getStream(c10::Device d) const override {
    return checked([&] {
      torchtpu::Stream cur = runtime().current_stream(index(d));
      return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, index(d)), cur.id());
    });
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kType, index(d)));
  }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    return checked([&] { return streams().add(runtime().create_stream(index(d))); });
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    const c10::Stream old = getStream(s.device());
    checked([&] { runtime().set_current_stream(streams().get(s)); });
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }

  void record(void** event, const c10::Stream& s, const c10::DeviceIndex, const c10::EventFlag) const override {
    checked([&] {
      if (*event == nullptr) {
        ttpu_event_t* e = nullptr;
        torchtpu::detail::check(ttpu_event_create(&e));
        *event = e;
      }
      torchtpu::detail::check(ttpu_event_record(static_cast<ttpu_event_t*>(*event), streams().get(s).capi()));
    });
  }
  void block(void* event, const c10::Stream& s) const override {
    if (event == nullptr) return;
    checked([&] {
      torchtpu::detail::check(ttpu_stream_wait_event(streams().get(s).capi(), static_cast<ttpu_event_t*>(event)));
    });
  }
  bool queryEvent(void* event) const override {
    if (event == nullptr) return true;
    return checked([&] {
      bool done = false;
      torchtpu::detail::check(ttpu_event_query(static_cast<ttpu_event_t*>(event), &done));
      return done;
    });
  }
  void synchronizeEvent(void* event) const override {
    if (event == nullptr) return;
    checked([&] { torchtpu::detail::check(ttpu_event_synchronize(static_cast<ttpu_event_t*>(event))); });
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start != nullptr && end != nullptr, "both events must be recorded before elapsed_time");
    return checked([&] {
      double ms = 0;
      torchtpu::detail::check(
          ttpu_event_elapsed_ms(static_cast<ttpu_event_t*>(start), static_cast<ttpu_event_t*>(end), &ms));
      return ms;
    });
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    ttpu_event_destroy(static_cast<ttpu_event_t*>(event));
  }
  bool queryStream(const c10::Stream& s) const override {
    return checked([&] { return streams().get(s).query(); });
  }
  void synchronizeStream(const c10::Stream& s) const override {
    checked([&] { const_cast<torchtpu::Stream&>(streams().get(s)).synchronize(); });
  }
  void synchronizeDevice(const c10::DeviceIndex) const override {
    checked([&] { runtime().synchronize(); });
  }

 private:
  static c10::DeviceIndex index(c10::Device d) { return d.index() >= 0 ? d.index() : current_device(); }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

// ------------------------------------------------------------ pinned memory

// Host memory for `pin_memory=True` and `Tensor.pin_memory()`. The runtime's
// transfers need no page-locked memory (PJRT copies from any host buffer),
// so this is ordinary CPU memory; it is tracked so that `is_pinned()` is
// true exactly for it, as on CUDA: DataLoader(pin_memory=True) and code
// that checks `is_pinned()` take the same paths as there.
class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = c10::alloc_cpu(nbytes);
    if (p != nullptr) {
      std::lock_guard<std::mutex> lock(mu());
      blocks().emplace(reinterpret_cast<uintptr_t>(p), nbytes);
    }
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  // Whether `ptr` lies in a live pinned block.
  static bool contains(const void* ptr) {
    const auto p = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> lock(mu());
    auto it = blocks().upper_bound(p);
    if (it == blocks().begin()) return false;
    --it;
    return p - it->first < std::max<size_t>(it->second, 1);
  }

 private:
  static void release(void* p) {
    {
      std::lock_guard<std::mutex> lock(mu());
      blocks().erase(reinterpret_cast<uintptr_t>(p));
    }
    c10::free_cpu(p);
  }
  // Leaked on purpose: tensors may be freed during static destruction.
  static std::mutex& mu() {
    static auto* m = new std::mutex();
    return *m;
  }
  static std::map<uintptr_t, size_t>& blocks() {
    static auto* b = new std::map<uintptr_t, size_t>();
    return *b;
  }
};

PinnedAllocator the_pinned_allocator;

// -------------------------------------------------------------------- hooks

struct TpuHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  void setCurrentDevice(c10::DeviceIndex d) const override { set_current_device(d); }
  c10::Device getDeviceFromPtr(void*) const override { return c10::Device(c10::DeviceType::PrivateUse1, current_device()); }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override { return new_generator(device); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &the_pinned_allocator; }
  bool isPinnedPtr(const void* data) const override { return PinnedAllocator::contains(data); }
  // `untyped_storage().resize_(n)`, as FSDP2 frees an unsharded parameter
  // (to 0 bytes) and allocates it again before its all-gather writes it.
  // Contents are kept only where there are none to keep: a storage never
  // written, or a resize from or to 0 bytes.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    TpuStorage* s = storage_of(storage);
    size_t old = 0;
    bool written = false;
    c10::DeviceIndex device = 0;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      old = s->nbytes;
      written = static_cast<bool>(s->base);
      device = s->device;
    }
    if (nbytes == old) return;
    TORCH_CHECK_NOT_IMPLEMENTED(!written || old == 0 || nbytes == 0, "resizing a written tpu storage in place from ",
                                old, " to ", nbytes, " bytes would have to keep its contents, which is not supported; "
                                "resize it to 0 bytes first, or resize the tensor instead");
    replace_storage(storage.unsafeGetStorageImpl(), nbytes, device, {});
  }
};

// Registered when the library loads, before any tensor exists.
const bool registered = [] {
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &the_allocator);
  at::RegisterPrivateUse1HooksInterface(new TpuHooks());
  return true;
}();

}  // namespace

// --------------------------------------------------------------- fallback

namespace {
std::atomic<bool> fallback_on{false};
std::mutex counts_mu;
std::map<std::string, int64_t> counts;
}  // namespace

void set_cpu_fallback(bool on) noexcept { fallback_on = on; }
bool cpu_fallback_enabled() noexcept { return fallback_on; }

std::vector<std::pair<std::string, int64_t>> fallback_counts() {
  std::lock_guard<std::mutex> lock(counts_mu);
  return {counts.begin(), counts.end()};
}

// Counts one CPU fallback of `op`; true the first time (when to warn).
bool count_fallback(const std::string& op) {
  std::lock_guard<std::mutex> lock(counts_mu);
  return counts[op]++ == 0;
}

}  // namespace torchtpu_ext
