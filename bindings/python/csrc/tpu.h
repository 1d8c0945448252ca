// The PyTorch "tpu" device over the torchtpu C ABI: shared declarations.
//
// A PyTorch storage on "tpu" holds a `TpuStorage` as its DataPtr context: one
// runtime tensor viewing the whole runtime storage. PyTorch keeps the view
// metadata (sizes, strides, offset); each kernel hands the runtime a view
// `(storage, offset, sizes, strides)` of it, so views, in-place ops and
// `out=` variants write through to the storage exactly as on CUDA.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/Generator.h>
#include <torchtpu/torchtpu.hpp>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

namespace torchtpu_ext {

// The process's runtime: created on first use, never destroyed, because
// tensors and the allocator may be used until the very end of the process.
const torchtpu::Runtime& runtime();
c10::DeviceIndex device_count() noexcept;
c10::DeviceIndex current_device() noexcept;
void set_current_device(c10::DeviceIndex index);
// Before the runtime starts (each returns false once it has): the default
// device it starts with (taken modulo the device count: a torchrun rank's
// LOCAL_RANK), and the client that spans processes it joins.
bool set_first_default_device(c10::DeviceIndex index);
bool join_processes(torchtpu::Distributed distributed);
bool runtime_started() noexcept;
// (node_id, num_nodes) of the started runtime's client, if it joined processes.
std::optional<std::pair<int, int>> joined_node();

// Rethrows a runtime error as the matching PyTorch error (UNIMPLEMENTED is
// NotImplementedError, OUT_OF_RANGE IndexError, else RuntimeError).
[[noreturn]] void rethrow(const torchtpu::Error& e);

// Runs `f`, rethrowing a runtime error as the matching PyTorch error.
template <class F>
auto checked(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const torchtpu::Error& e) {
    rethrow(e);
  }
}

// The runtime side of one PyTorch storage. `base` stays empty until the
// storage is first read or written (`torch.empty` allocates nothing).
struct TpuStorage {
  std::mutex mu;
  torchtpu::Tensor base;
  size_t nbytes = 0;
  c10::DeviceIndex device = 0;
  // The fake data pointer PyTorch sees for it.
  void* address = nullptr;
};

c10::Allocator* allocator();
// A PyTorch storage seen as a range of a TpuStorage. A storage of ours is the
// whole of it; one PyTorch built over our data pointer elsewhere (from_blob)
// is found by its address and may start inside it.
struct StorageRef {
  TpuStorage* storage;
  size_t byte_offset;
};
StorageRef storage_ref(const c10::Storage& storage);
// Whether `storage`'s DataPtr is ours (not another allocator's over our data).
bool owns_storage(const c10::Storage& storage);
// The TpuStorage of a tpu tensor or storage (checked).
TpuStorage* storage_of(const at::Tensor& t);
TpuStorage* storage_of(const c10::Storage& storage);
// A runtime view of `t`. Reading a storage never written gives zeros.
torchtpu::Tensor handle_of(const at::Tensor& t);
// The runtime handle of `t`'s storage (ready to be read as `t`'s dtype) and
// `t`'s offset in it, in elements: `t` as a `ttpu_view_t` without a handle of
// its own. The handle stays the storage's until the storage is rebound.
struct StorageView {
  const ttpu_tensor_t* storage;
  int64_t offset;
};
StorageView storage_view(const at::Tensor& t);
// Downloads uint8 tensor `t` (contiguous) into `out` when its storage holds a
// value of another dtype: serialization reads every storage as bytes, and
// handle_of would retype the storage on the device (and back at its next
// typed read). False, with nothing done, where that does not apply.
bool download_as_bytes(const at::Tensor& t, void* out);
// A tpu tensor over a new storage holding runtime tensor `r` (its whole
// storage, with `r`'s own view geometry).
at::Tensor wrap(torchtpu::Tensor r);
// The same for a result of `ttpu_op_call_id`, whose handle (taken) is `handle`.
at::Tensor wrap(const ttpu_result_t& r, torchtpu::Tensor handle);
// Whether `t` is a dense view of its whole storage (then a new value can
// replace the storage's value without a copy).
bool covers_storage(const at::Tensor& t);
// Writes `value` (a runtime tensor broadcastable to `dst`) into `dst`. When
// `value` is `fresh` (its storage is no other tensor's) and `dst` covers its
// storage, the storage is rebound to it: no copy, no program. Otherwise the
// runtime copies through the view.
void write_into(const at::Tensor& dst, torchtpu::Tensor value, bool fresh);
// `dst`, an argument an op wrote, takes `r`, the runtime's value of it after
// the op: over `dst`'s own storage, `dst` takes its shape (resize_); over
// another storage (an out= of another shape, a grown resize_), every tensor
// sharing `dst`'s storage is pointed at `r`'s, as PyTorch's resize does.
void adopt(const at::Tensor& dst, torchtpu::Tensor r);
// Points every tensor sharing `impl` at a new storage of `nbytes` holding
// `base` (empty: not yet written).
void replace_storage(c10::StorageImpl* impl, size_t nbytes, c10::DeviceIndex device, torchtpu::Tensor base);
// Whether the storage of `t` was ever written (else reading it gives zeros).
bool materialized(const at::Tensor& t);
// A runtime tensor of `t` on tpu `device`: `t` itself (viewed) when it is on
// tpu, else an upload of the CPU tensor.
torchtpu::Tensor upload(const at::Tensor& cpu, c10::DeviceIndex device);

// Generators (csrc/generator.cpp): device `device`'s default (what random
// ops draw from without `generator=`; -1 is the current device), a new
// independent one (`torch.Generator(device="tpu")`), and the runtime
// generator of a tpu at::Generator (checked: `op` names the caller).
const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);
const torchtpu::Generator& runtime_generator(const at::Generator& g, const std::string& op);

// Opt-in CPU fallback for ops the runtime lacks, and its counters.
void set_cpu_fallback(bool on) noexcept;
bool cpu_fallback_enabled() noexcept;
std::vector<std::pair<std::string, int64_t>> fallback_counts();
// Counts one CPU fallback of `op`; true the first time (when to warn).
bool count_fallback(const std::string& op);

}  // namespace torchtpu_ext
