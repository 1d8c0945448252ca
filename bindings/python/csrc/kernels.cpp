// Kernels of the PyTorch "tpu" device.
//
// One boxed fallback forwards every aten op by its schema name to the
// runtime's op registry, so op coverage grows in Rust alone. A handful of ops
// are registered explicitly because they are about PyTorch's own metadata or
// memory (empty, views, copies across devices, resize, item).
#include "tpu.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <deque>
#include <sstream>
#include <unordered_map>
#include <optional>
#include <set>

namespace torchtpu_ext {
namespace {

using torchtpu::Arg;

constexpr c10::DispatchKeySet kTpuKeys{c10::DispatchKey::PrivateUse1};

std::string full_name(const c10::FunctionSchema& s) {
  return s.overload_name().empty() ? s.name() : s.name() + "." + s.overload_name();
}

c10::DeviceIndex tpu_index(const c10::Device& d) { return d.index() >= 0 ? d.index() : current_device(); }

// ------------------------------------------------------------ one runtime call

// An op the runtime runs, as PyTorch declares it: its id for
// `ttpu_op_call_id` and its full name, looked up once per operator.
struct RuntimeOp {
  bool runs = false;
  size_t id = 0;
  std::string name;
  // The schema's name and overload: a schema freed with its library (a
  // torch.library fragment) may leave its address to another op's.
  std::string base, overload;
  bool describes(const c10::FunctionSchema& s) const { return s.name() == base && s.overload_name() == overload; }
};

// Whether (and as which op) the runtime runs `schema` as PyTorch declares
// it, an out= form included (core derives it from its functional op).
const RuntimeOp& runtime_op(const c10::FunctionSchema& schema) {
  static std::mutex mu;
  static std::unordered_map<const c10::FunctionSchema*, RuntimeOp> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(&schema);
  if (it != known.end() && it->second.describes(schema)) return it->second;
  RuntimeOp op;
  op.name = full_name(schema);
  op.base = schema.name();
  op.overload = schema.overload_name();
  std::ostringstream decl;
  decl << schema;
  bool runs = false;
  if (ttpu_error_t* e = ttpu_op_declare(decl.str().c_str(), &runs)) {
    ttpu_error_destroy(e);
    runs = false;
  }
  if (runs) {
    if (ttpu_error_t* e = ttpu_op_lookup(op.name.c_str(), &op.id)) {
      ttpu_error_destroy(e);
      runs = false;
    }
  }
  op.runs = runs;
  return known.insert_or_assign(&schema, std::move(op)).first->second;
}

// The results of one call; handles not taken are freed.
struct Results {
  c10::SmallVector<ttpu_result_t, 8> r;
  Results() = default;
  Results(const Results&) = delete;
  Results& operator=(const Results&) = delete;
  ~Results() {
    for (ttpu_result_t& x : r) ttpu_tensor_destroy(x.tensor);
  }
  // Result `i`'s handle, now the caller's (empty when it has none).
  torchtpu::Tensor take(size_t i) {
    ttpu_tensor_t* h = std::exchange(r[i].tensor, nullptr);
    return h == nullptr ? torchtpu::Tensor() : torchtpu::Tensor(runtime().capi(), h);
  }
};

// The arguments of one runtime call, as the C values of `ttpu_op_call_id`:
// a tpu tensor is a view of its storage's runtime handle with PyTorch's own
// geometry (no handle per view); everything a value points at lives here
// until the call returns.
struct Call {
  const RuntimeOp& op;
  std::deque<torchtpu::Tensor> uploads;
  std::deque<ttpu_view_t> views;
  std::deque<std::vector<ttpu_view_t>> view_lists;
  std::deque<std::vector<int64_t>> int_lists;
  std::deque<std::vector<double>> double_lists;
  std::deque<std::string> strings;
  std::vector<ttpu_value_t> values;
  c10::DeviceIndex device = -1;

  const std::string& name() const { return op.name; }

  // The device of the op: its first tpu tensor, else its `device` argument.
  void find_device(const std::vector<c10::IValue>& vals) {
    auto see = [this](const at::Tensor& t) {
      if (device < 0 && t.defined() && t.device().is_privateuseone()) device = t.device().index();
    };
    for (const c10::IValue& v : vals) {
      if (v.isTensor()) see(v.toTensor());
      if (v.isTensorList()) for (const at::Tensor& t : v.toTensorList().vec()) see(t);
      if (v.isList()) for (const c10::IValue& e : v.toListRef()) if (e.isTensor()) see(e.toTensor());
    }
    for (const c10::IValue& v : vals) {
      if (device < 0 && v.isDevice() && v.toDevice().is_privateuseone()) device = tpu_index(v.toDevice());
    }
    if (device < 0) device = current_device();
  }

  ttpu_view_t view(const at::Tensor& t) {
    if (t.device().is_privateuseone()) {
      const StorageView sv = storage_view(t);
      return ttpu_view_t{sv.storage, t.sizes().data(), t.strides().data(), static_cast<size_t>(t.dim()), sv.offset};
    }
    // Like CUDA, a 0-dim CPU tensor may join a device op as a scalar.
    TORCH_CHECK(t.device().is_cpu() && t.dim() == 0,
                "Expected all tensors to be on the same device, but found at least two devices, tpu:",
                static_cast<int>(device), " and ", t.device(), "! (in ", name(), ")");
    const torchtpu::Tensor& u = uploads.emplace_back(upload(t, device));
    return ttpu_view_t{u.capi(), nullptr, nullptr, 0, 0};
  }

  static ttpu_value_t value(int32_t kind, int64_t i = 0, double d = 0.0, const void* ptr = nullptr, size_t len = 0) {
    return ttpu_value_t{kind, i, d, ptr, len};
  }

  ttpu_value_t ints(std::vector<int64_t> v) {
    const std::vector<int64_t>& kept = int_lists.emplace_back(std::move(v));
    return value(TTPU_VALUE_KIND_INT_LIST, 0, 0.0, kept.data(), kept.size());
  }

  ttpu_value_t arg(const c10::Argument& a, const c10::IValue& v) {
    const c10::TypePtr& real = a.real_type();
    if (v.isNone()) return value(TTPU_VALUE_KIND_NONE);
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!t.defined()) return value(TTPU_VALUE_KIND_NONE);
      return value(TTPU_VALUE_KIND_VIEW, 0, 0.0, &views.emplace_back(view(t)));
    }
    if (v.isTensorList()) {
      std::vector<ttpu_view_t>& vs = view_lists.emplace_back();
      for (const at::Tensor& t : v.toTensorList().vec()) vs.push_back(view(t));
      return value(TTPU_VALUE_KIND_VIEW_LIST, 0, 0.0, vs.data(), vs.size());
    }
    if (v.isIntList()) return ints(v.toIntVector());
    if (v.isSymIntList()) {
      std::vector<int64_t> out;
      for (const c10::SymInt& s : v.toSymIntVector()) out.push_back(s.guard_int(__FILE__, __LINE__));
      return ints(std::move(out));
    }
    if (v.isBoolList()) {  // bool[N] (output_mask): the runtime binds it as 0/1 ints
      std::vector<int64_t> out;
      for (bool b : v.toBoolList()) out.push_back(b ? 1 : 0);
      return ints(std::move(out));
    }
    if (v.isDoubleList()) {
      const std::vector<double>& kept = double_lists.emplace_back(v.toDoubleVector());
      return value(TTPU_VALUE_KIND_DOUBLE_LIST, 0, 0.0, kept.data(), kept.size());
    }
    if (v.isList()) {  // Tensor?[]: a None entry is a view of no storage
      std::vector<ttpu_view_t>& vs = view_lists.emplace_back();
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor() && e.toTensor().defined()) {
          vs.push_back(view(e.toTensor()));
        } else {
          vs.push_back(ttpu_view_t{nullptr, nullptr, nullptr, 0, 0});
        }
      }
      return value(TTPU_VALUE_KIND_VIEW_LIST, 0, 0.0, vs.data(), vs.size());
    }
    const bool scalar = real->kind() == c10::TypeKind::NumberType ||
                        (real->kind() == c10::TypeKind::OptionalType &&
                         real->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::NumberType);
    if (v.isInt()) {
      if (scalar) return torchtpu::Scalar(v.toInt()).value();
      const c10::TypePtr elem = real->kind() == c10::TypeKind::OptionalType
                                    ? real->castRaw<c10::OptionalType>()->getElementType()
                                    : real;
      if (elem->kind() == c10::TypeKind::ScalarTypeType) return value(TTPU_VALUE_KIND_DTYPE, v.toInt());
      return value(TTPU_VALUE_KIND_INT, v.toInt());
    }
    if (v.isSymInt()) return value(TTPU_VALUE_KIND_INT, v.toSymInt().guard_int(__FILE__, __LINE__));
    if (v.isDouble()) {
      return scalar ? torchtpu::Scalar(v.toDouble()).value() : value(TTPU_VALUE_KIND_DOUBLE, 0, v.toDouble());
    }
    if (v.isBool()) return scalar ? torchtpu::Scalar(v.toBool()).value() : value(TTPU_VALUE_KIND_BOOL, v.toBool());
    if (v.isString()) {
      const std::string& kept = strings.emplace_back(v.toStringRef());
      return value(TTPU_VALUE_KIND_STRING, 0, 0.0, kept.data(), kept.size());
    }
    if (v.isDevice()) {
      TORCH_CHECK(v.toDevice().is_privateuseone(), name(), ": argument '", a.name(), "' names ", v.toDevice(),
                  ", not a tpu device");
      return value(TTPU_VALUE_KIND_INT, tpu_index(v.toDevice()));
    }
    // The IValue keeps the generator alive until the call returns.
    if (v.isGenerator()) return value(TTPU_VALUE_KIND_GENERATOR, 0, 0.0, runtime_generator(v.toGenerator(), name()).capi());
    if (v.isComplexDouble()) TORCH_CHECK_NOT_IMPLEMENTED(false, name(), ": complex numbers are not supported on TPU");
    TORCH_CHECK_NOT_IMPLEMENTED(false, name(), ": argument '", a.name(), "' of type ", a.type()->str(),
                                " cannot be passed to the TPU runtime");
  }

  // Runs the op: one crossing into the runtime.
  void run(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& vals, Results& out) {
    const std::vector<c10::Argument>& sargs = schema.arguments();
    find_device(vals);
    values.reserve(vals.size());
    for (size_t i = 0; i < vals.size(); ++i) values.push_back(arg(sargs[i], vals[i]));
    // Room for the schema's returns; a Tensor[] return (split, the foreach
    // ops) gets room for one result per listed input and more, so that it
    // rarely has to run again with a larger array.
    size_t capacity = 8;
    for (const c10::Argument& r : schema.returns()) {
      if (r.type()->kind() == c10::TypeKind::ListType) {
        size_t listed = 0;
        for (const auto& l : view_lists) listed += l.size();
        capacity = std::max<size_t>(torchtpu::kMaxResults, 8 + listed);
      }
    }
    for (;;) {
      out.r.assign(capacity, ttpu_result_t{});
      size_t n = 0;
      ttpu_error_t* e = ttpu_op_call_id(runtime().capi(), op.id, values.data(), values.size(), out.r.data(),
                                        sizeof(ttpu_result_t), out.r.size(), &n);
      if (e == nullptr) {
        out.r.resize(n);
        return;
      }
      if (ttpu_error_code(e) == TTPU_CODE_RESOURCE_EXHAUSTED && capacity < torchtpu::kMaxResults * 64) {
        ttpu_error_destroy(e);
        out.r.clear();
        capacity *= 16;
        continue;
      }
      out.r.clear();
      checked([&] { torchtpu::detail::check(e); });
    }
  }
};

bool same_alias_set(const c10::AliasInfo* a, const c10::AliasInfo* b) {
  return a != nullptr && b != nullptr && a->beforeSets() == b->beforeSets();
}

// Pushes the schema's returns: a mutated argument itself (taking the
// runtime's value when that is another shape or storage: an out= of another
// shape, a grown resize_), a view as PyTorch metadata over its base, or a
// new tensor (core never returns an input's storage unless the schema says
// so).
void push_returns(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args, Results& results,
                  torch::jit::Stack* stack) {
  size_t next = 0;
  const size_t count = results.r.size();
  for (const c10::Argument& ret : schema.returns()) {
    const c10::AliasInfo* alias = ret.alias_info();
    if (ret.type()->kind() == c10::TypeKind::ListType) {
      std::vector<at::Tensor> out;
      for (; next < count; ++next) {
        out.push_back(results.r[next].tensor == nullptr ? at::Tensor() : wrap(results.r[next], results.take(next)));
      }
      stack->emplace_back(std::move(out));
      continue;
    }
    TORCH_CHECK(next < count, schema.name(), ": the runtime returned ", count, " values");
    const size_t k = next++;
    const ttpu_result_t& r = results.r[k];
    if (alias != nullptr) {
      size_t i = 0;
      while (i < args.size() && !same_alias_set(schema.arguments()[i].alias_info(), alias)) ++i;
      TORCH_CHECK(i < args.size(), full_name(schema), ": no argument matches the alias of a return");
      const at::Tensor& base = args[i].toTensor();
      if (alias->isWrite()) {
        // Written where it is (r.arg set): nothing to adopt.
        if (r.tensor != nullptr) adopt(base, results.take(k));
        stack->emplace_back(base);
      } else if (r.tensor != nullptr) {
        stack->emplace_back(at::native::as_strided_tensorimpl(base, c10::IntArrayRef(r.sizes, r.ndim),
                                                              c10::IntArrayRef(r.strides, r.ndim), r.offset));
      } else {
        // A view with the argument's own geometry: still a tensor of its own.
        stack->emplace_back(
            at::native::as_strided_tensorimpl(base, base.sizes(), base.strides(), base.storage_offset()));
      }
      continue;
    }
    if (r.tensor == nullptr) {
      TORCH_CHECK(r.arg < 0, full_name(schema), ": the runtime returned argument ", r.arg,
                  " for a return the schema does not declare an alias");
      stack->emplace_back(at::Tensor());
      continue;
    }
    if (ret.type()->kind() == c10::TypeKind::BoolType) {
      // A bool return (torch.equal): core's 0-d bool tensor, read on the
      // host, a sync as on CUDA.
      stack->emplace_back(wrap(r, results.take(k)).item<bool>());
      continue;
    }
    stack->emplace_back(wrap(r, results.take(k)));
  }
}

// The `Tensor?[]` indices of an indexing op: CPU index tensors are uploaded
// to the device of `self`, as CUDA accepts them (`x[torch.tensor([1, 2])]`).
// Boolean masks pass as they are: core's dispatch expands them.
void prepare_indices(std::vector<c10::IValue>& args) {
  if (args.empty() || !args[0].isTensor()) return;
  const c10::Device device = args[0].toTensor().device();
  for (c10::IValue& v : args) {
    if (!v.isList()) continue;
    bool any = false;
    for (const c10::IValue& e : v.toListRef()) any = any || (e.isTensor() && e.toTensor().defined() && e.toTensor().is_cpu());
    if (!any) continue;
    c10::List<std::optional<at::Tensor>> out;
    for (const c10::IValue& e : v.toListRef()) {
      const at::Tensor t = e.isTensor() ? e.toTensor() : at::Tensor();
      if (!t.defined()) {
        out.push_back(std::nullopt);
      } else {
        out.push_back(t.is_cpu() ? t.to(device) : t);
      }
    }
    v = c10::IValue(out);
  }
}

bool takes_indices(const std::string& name) {
  return name == "aten::index.Tensor" || name == "aten::index_put" || name == "aten::index_put_" ||
         name == "aten::_index_put_impl_";
}

// ------------------------------------------------ results on another device

// The device a `device` argument names when it is not tpu. A factory such as
// `zeros_like(t, device="cpu")` reaches tpu by its tensor argument, yet its
// result belongs on the device it names.
std::optional<c10::Device> other_device(const torch::jit::Stack& stack, size_t n) {
  for (auto it = stack.end() - n; it != stack.end(); ++it) {
    if (it->isDevice() && !it->toDevice().is_privateuseone()) return it->toDevice();
  }
  return std::nullopt;
}

// Whether the op reads only the metadata of `self` (sizes, strides, dtype),
// never its values: the `*_like` and `new_*` factories.
bool reads_metadata_of_self(const c10::FunctionSchema& schema) {
  const std::string base = schema.name().substr(schema.name().find("::") + 2);
  return (base.size() > 5 && base.compare(base.size() - 5, 5, "_like") == 0) || base.rfind("new_", 0) == 0;
}

// Runs `op` on `device` (cpu, meta, ...) with its tpu tensors moved there: a
// tensor whose values the op never reads becomes an uninitialized one of the
// same geometry (nothing is downloaded), the others are copied. No tensor of
// the call stays on tpu, so the dispatcher sends it to `device`'s kernel.
void run_on_device(const c10::OperatorHandle& op, c10::Device device, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t n = schema.arguments().size();
  const bool metadata_self = reads_metadata_of_self(schema);
  auto moved = [&](const at::Tensor& t, const c10::Argument& a) {
    if (!t.defined() || !t.device().is_privateuseone()) return t;
    if (metadata_self && a.name() == "self") return at::empty_strided(t.sizes(), t.strides(), t.options().device(device));
    return t.to(device);
  };
  for (size_t i = 0; i < n; ++i) {
    const c10::Argument& a = schema.arguments()[i];
    c10::IValue& v = (*stack)[stack->size() - n + i];
    TORCH_CHECK(a.alias_info() == nullptr || !a.alias_info()->isWrite(), full_name(schema), ": argument 'device' names ",
                device, ", but the op writes its tpu argument '", a.name(), "'");
    if (v.isTensor()) {
      v = moved(v.toTensor(), a);
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> ts;
      for (const at::Tensor& t : v.toTensorList().vec()) ts.push_back(moved(t, a));
      v = c10::IValue(ts);
    } else if (v.isList() && *a.type() == *c10::ListType::ofOptionalTensors()) {
      c10::List<std::optional<at::Tensor>> ts;
      for (const c10::IValue& e : v.toListRef()) {
        ts.push_back(e.isTensor() ? std::optional<at::Tensor>(moved(e.toTensor(), a)) : std::nullopt);
      }
      v = c10::IValue(ts);
    }
  }
  op.callBoxed(stack);
}

// A tensor with a lazy conjugate or negative bit holds the values before
// that op: runtime ops read stored values, so such inputs are resolved
// first. PyTorch's own fallbacks for those bits pass some ops through to the
// backend (clone, the matrix products, whose BLAS kernels fold a conjugate
// into the call). A written argument with a bit set is refused: writing the
// stored values would be wrong, and copy_ (which handles it) is not a
// runtime op.
void resolve_math_bits(const c10::FunctionSchema& schema, torch::jit::Stack* stack) {
  const size_t n = schema.arguments().size();
  auto resolved = [&](const at::Tensor& t, const c10::Argument& a) {
    if (!t.defined() || (!t.is_conj() && !t.is_neg())) return t;
    TORCH_CHECK_NOT_IMPLEMENTED(a.alias_info() == nullptr || !a.alias_info()->isWrite(), full_name(schema),
                                ": argument '", a.name(), "' is a conjugate or negative view, which this op cannot "
                                "write in place on TPU; call resolve_conj() or resolve_neg() on it first");
    // Not resolve_conj(): it clones, and clone passes the bit through to
    // this fallback again. copy_ (ours) applies the bits.
    at::Tensor out = at::empty(t.sizes(), t.options());
    out.copy_(t);
    return out;
  };
  for (size_t i = 0; i < n; ++i) {
    const c10::Argument& a = schema.arguments()[i];
    c10::IValue& v = (*stack)[stack->size() - n + i];
    if (v.isTensor()) {
      v = resolved(v.toTensor(), a);
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> ts = v.toTensorList().vec();
      for (at::Tensor& t : ts) t = resolved(t, a);
      v = c10::IValue(ts);
    }
  }
}

void tpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t n = schema.arguments().size();
  if (auto device = other_device(*stack, n)) {
    run_on_device(op, *device, stack);
    return;
  }
  const RuntimeOp& rop = runtime_op(schema);
  const std::string& name = rop.name;
  if (rop.runs) {
    resolve_math_bits(schema, stack);
    std::vector<c10::IValue> args(stack->end() - n, stack->end());
    torch::jit::drop(*stack, n);
    if (takes_indices(name)) prepare_indices(args);
    Call call{rop};
    Results results;
    call.run(schema, args, results);
    push_returns(schema, args, results, stack);
    return;
  }
  if (cpu_fallback_enabled()) {
    if (count_fallback(name)) {
      TORCH_WARN("operator ", name, " is not implemented for TPU; running it on the CPU "
                 "(torch.tpu.enable_cpu_fallback is on; counted in torch.tpu.fallback_stats()). "
                 "This copies its tensors to the host and back.");
    }
    at::native::cpu_fallback(op, stack);
    return;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(false, "operator ", name, " is not implemented for TPU. Set "
                              "torch.tpu.enable_cpu_fallback = True to run unsupported ops on the CPU "
                              "(slower: each call copies its tensors to the host; every fallback is warned "
                              "about and counted).");
}

// ------------------------------------------------------------ explicit kernels

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, "tpu tensors are strided (dense) only");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "pinned memory applies to CPU tensors, not tpu");
  c10::DeviceGuard guard(c10::device_or_default(device));
  return at::detail::empty_generic(size, allocator(), kTpuKeys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, "tpu tensors are strided (dense) only");
  c10::DeviceGuard guard(c10::device_or_default(device));
  return at::detail::empty_strided_generic(size, stride, allocator(), kTpuKeys, c10::dtype_or_default(dtype));
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

// Downloads tpu tensor `src` into `out`, a dense CPU tensor of its dtype and
// shape.
void download_into(const at::Tensor& src, const at::Tensor& out) {
  if (download_as_bytes(src, out.data_ptr())) return;
  torchtpu::Tensor h = handle_of(src);
  try {
    torchtpu::detail::check(ttpu_tensor_to_host(runtime().capi(), h.capi(), out.data_ptr(), out.nbytes()));
  } catch (const torchtpu::Error& e) {
    rethrow(e);
  }
}

// A dense CPU copy of a tpu tensor's stored values (without its lazy
// conjugate and negative bits).
at::Tensor to_cpu(const at::Tensor& src) {
  at::Tensor out = at::empty(src.sizes(), src.options().device(c10::kCPU));
  download_into(src, out);
  return out;
}

// After a copy of stored values into `self` from a source with the given
// lazy conjugate and negative bits: `self` stores what its own bits need
// (PyTorch's copy_ does the same fix-up).
void match_bits(const at::Tensor& self, bool conj, bool neg) {
  if (self.is_conj() != conj) torchtpu::call(runtime(), "aten::conj_physical_", handle_of(self));
  if (self.is_neg() != neg) torchtpu::call(runtime(), "aten::neg_", handle_of(self));
}

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool /*non_blocking*/) {
  if (self.numel() == 0) return self;
  if (!self.device().is_privateuseone()) {
    // Straight into `self` where it has the layout a download writes (the
    // common `.cpu()` and staging case): one copy, not two.
    if (self.is_contiguous() && self.scalar_type() == src.scalar_type() && self.sizes() == src.sizes() &&
        self.is_conj() == src.is_conj() && self.is_neg() == src.is_neg()) {
      download_into(src, self);
    } else {
      at::Tensor host = to_cpu(src);
      host._set_conj(src.is_conj());
      host._set_neg(src.is_neg());
      self.copy_(host);
    }
    return self;
  }
  const c10::DeviceIndex device = self.device().index();
  const bool whole = covers_storage(self) && src.sizes() == self.sizes();
  try {
    if (src.device().is_privateuseone()) {
      if (whole && !materialized(self)) {
        // Nothing to keep in self: the converted copy becomes its value.
        torchtpu::Tensor v = torchtpu::call1(runtime(), "aten::_to_copy", handle_of(src),
                                             static_cast<torchtpu::DType>(self.scalar_type()), std::nullopt,
                                             static_cast<int64_t>(device));
        write_into(self, std::move(v), true);
      } else {
        torchtpu::Tensor v = handle_of(src);
        write_into(self, std::move(v), false);
      }
      match_bits(self, src.is_conj(), src.is_neg());
      return self;
    }
    const at::Tensor resolved = src.resolve_conj().resolve_neg();
    const at::Tensor host = whole ? resolved.to(self.scalar_type()) : resolved;
    write_into(self, upload(host, device), true);
    match_bits(self, false, false);
  } catch (const torchtpu::Error& e) {
    rethrow(e);
  }
  return self;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor d = dst;
  copy_(d, self, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) { return to_cpu(self).item(); }

// nn.TransformerEncoder asks this (in eval under no_grad, with a key padding
// mask) to decide whether to pack the batch into a nested tensor, a layout
// tpu tensors do not have. Answering false keeps the encoder on its padded
// path, the same as `enable_nested_tensor=False`: every layer runs the
// fused encoder layer with the padding mask. The values at valid positions
// are the same; at padded positions they are the layers' own rather than
// the zeros the nested path writes (documented in README.md).
bool nested_tensor_from_mask_left_aligned(const at::Tensor& t, const at::Tensor& mask) {
  TORCH_CHECK(t.dim() >= 2 && mask.dim() == 2 && mask.size(0) == t.size(0) && mask.size(1) == t.size(1),
              "_nested_tensor_from_mask_left_aligned: mask of size ", mask.sizes(), " does not fit a tensor of size ",
              t.sizes());
  return false;
}

// Core resizes (keeping the old elements, growing the storage when it must);
// `self` takes the result's geometry and, when grown, its storage.
const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  torchtpu::Tensor r = checked([&] {
    return torchtpu::call1(runtime(), "aten::resize_", handle_of(self), size.vec(),
                           memory_format ? torchtpu::Arg(static_cast<int64_t>(*memory_format)) : torchtpu::Arg(std::nullopt));
  });
  adopt(self, std::move(r));
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                               c10::IntArrayRef stride) {
  TORCH_CHECK(source.device().is_privateuseone(), "set_: expected a tpu storage, got one on ", source.device());
  self.unsafeGetTensorImpl()->set_storage_keep_dtype(std::move(source));
  self.unsafeGetTensorImpl()->set_sizes_and_strides(size, stride, offset);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) {
  const int64_t n = static_cast<int64_t>(source.nbytes() / self.element_size());
  return set_source_storage(self, std::move(source), 0, {n}, {1});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& src) {
  return set_source_storage(self, src.storage(), src.storage_offset(), src.sizes(), src.strides());
}

// Whether `param.data = from` may swap `self`'s storage and device in place.
// PyTorch answers yes only among its built-in dense backends, so without
// this `model.to("tpu")` made a new Parameter per module and broke ties (an
// embedding shared with the output projection got two gradients). Dense
// CPU and tpu tensors are as interchangeable as CPU and CUDA ones.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  if (self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set())) return true;
  auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && !t.is_quantized() && (t.is_cpu() || t.device().is_privateuseone());
  };
  return dense(self) && dense(from);
}

}  // namespace

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&tpu_fallback>()); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("view", at::native::view);
  // PyTorch's own metadata kernels: a view of the same storage as the
  // complex dtype's parts, or the other way round (`ready_base` retypes the
  // storage on the device when the other dtype reads it).
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("unfold", at::native::unfold);
  m.impl("copy_", copy_);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("_nested_tensor_from_mask_left_aligned", nested_tensor_from_mask_left_aligned);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage_storage_offset", set_source_storage);
  m.impl("set_.source_Storage", set_storage);
  m.impl("set_.source_Tensor", set_tensor);
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
}

namespace {

// Ops PyTorch implements with a CompositeExplicitAutograd kernel never reach
// a backend fallback, so every runtime op is also registered by name:
// `native_layer_norm` then runs as the runtime's one op instead of PyTorch's
// decomposition through batch norm. Skipped: CompositeImplicitAutograd ops
// (autograd sees their decomposition), views (PyTorch metadata), and the ops
// registered above.
const bool runtime_ops_registered = [] {
  static auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__,
                                        __LINE__);
  static const std::set<std::string> explicit_ops = {
      "empty.memory_format", "empty_strided", "as_strided", "view", "view_as_real", "view_as_complex",
      "_reshape_alias", "unfold", "copy_",
      "_copy_from", "_copy_from_and_resize", "_local_scalar_dense", "resize_", "_to_copy",
      "_has_compatible_shallow_copy_type"};
  const size_t n = ttpu_op_count();
  for (size_t i = 0; i < n; ++i) {
    const char* full = nullptr;
    if (ttpu_error_t* e = ttpu_op_name(i, &full)) {
      ttpu_error_destroy(e);
      continue;
    }
    std::string name(full);
    if (name.rfind("aten::", 0) != 0) continue;
    name = name.substr(6);
    const size_t dot = name.find('.');
    const std::string base = name.substr(0, dot);
    const std::string overload = dot == std::string::npos ? "" : name.substr(dot + 1);
    if (explicit_ops.count(name) != 0) continue;
    auto op = c10::Dispatcher::singleton().findSchema({"aten::" + base, overload});
    if (!op || op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
      continue;
    }
    bool view = false;
    for (const c10::Argument& r : op->schema().returns()) {
      view = view || (r.alias_info() != nullptr && !r.alias_info()->isWrite());
    }
    if (view) continue;
    lib->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&tpu_fallback>());
  }
  return true;
}();

}  // namespace

}  // namespace torchtpu_ext
