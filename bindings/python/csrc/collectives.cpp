// Collectives on tpu tensors, for torch.tpu.comm and the `tpu` process
// group: each call hands the runtime one tensor per member device and wraps
// the outputs as new tpu tensors. Semantics live in the runtime. Also the
// c10d store a client that spans processes rendezvouses through.
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/exception.h>
#include <torch/csrc/utils/pybind.h>

#include "tpu.h"

namespace py = pybind11;

namespace torchtpu_ext {
namespace {

// Runs collective `kind` (a ttpu_collective_kind) over `inputs`: over their
// own devices when `group` is empty, else over `group` (PJRT global device
// ids in rank order, `inputs` being this process's members).
std::vector<at::Tensor> collective(int kind, int reduce_op, int64_t root, const std::vector<int64_t>& pairs,
                                   const std::vector<int64_t>& group, const std::vector<at::Tensor>& inputs) {
  TORCH_CHECK(pairs.size() % 2 == 0, "collective: pairs must hold (source, target) pairs");
  std::vector<torchtpu::Tensor> handles;
  handles.reserve(inputs.size());
  for (const at::Tensor& t : inputs) {
    TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, "collective: expected tpu tensors, got one on ",
                t.device());
    handles.push_back(handle_of(t));
  }
  ttpu_collective_t c = torchtpu::detail::collective_of(static_cast<ttpu_collective_kind>(kind));
  c.reduce_op = static_cast<ttpu_reduce_op>(reduce_op);
  c.root = root;
  c.pairs = pairs.data();
  c.num_pairs = pairs.size() / 2;
  std::vector<torchtpu::Tensor> out;
  try {
    py::gil_scoped_release nogil;
    out = torchtpu::detail::collective(handles, c, "collective", group);
  } catch (const torchtpu::Error& e) {
    rethrow(e);
  }
  std::vector<at::Tensor> result;
  result.reserve(out.size());
  for (torchtpu::Tensor& h : out) result.push_back(wrap(std::move(h)));
  return result;
}

// PJRT's key-value callbacks over a c10d store (the process group's), so one
// rendezvous serves torch.distributed and the PJRT client. Keys get a prefix
// of their own: PJRT leaves avoiding collisions to the caller. A c10d store
// implemented in C++ (TCPStore, FileStore, PrefixStore) needs no GIL, so
// PJRT's threads call it directly.
class C10dStore final : public torchtpu::KeyValueStore {
 public:
  C10dStore(c10::intrusive_ptr<c10d::Store> store, std::string prefix)
      : store_(std::move(store)), prefix_(std::move(prefix)) {}

  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    const std::string k = prefix_ + key;
    try {
      // c10d reads a zero timeout as "wait forever", so none is a check.
      if (timeout.count() <= 0) {
        if (!store_->check({k})) throw torchtpu::Error(TTPU_CODE_NOT_FOUND, "c10d store: no key " + k);
      } else {
        store_->wait({k}, timeout);
      }
      std::vector<uint8_t> v = store_->get(k);
      return std::string(v.begin(), v.end());
    } catch (const torchtpu::Error&) {
      throw;
    } catch (const c10::DistStoreError& e) {
      // Its wait's timeout; the message says how long it waited.
      throw torchtpu::Error(TTPU_CODE_DEADLINE_EXCEEDED,
                            std::string("c10d store get ") + k + ": " + e.what_without_backtrace());
    } catch (const std::exception& e) {
      throw torchtpu::Error(TTPU_CODE_UNAVAILABLE, std::string("c10d store get ") + k + ": " + e.what());
    }
  }

  void put(const std::string& key, const std::string& value) override {
    const std::string k = prefix_ + key;
    try {
      store_->set(k, std::vector<uint8_t>(value.begin(), value.end()));
    } catch (const std::exception& e) {
      throw torchtpu::Error(TTPU_CODE_UNAVAILABLE, std::string("c10d store set ") + k + ": " + e.what());
    }
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  std::string prefix_;
};

void barrier(const std::vector<int64_t>& devices) {
  try {
    py::gil_scoped_release nogil;
    torchtpu::barrier(runtime(), devices);
  } catch (const torchtpu::Error& e) {
    rethrow(e);
  }
}

}  // namespace

void register_collectives(py::module& m) {
  m.def("_collective", &collective, py::arg("kind"), py::arg("reduce_op"), py::arg("root"), py::arg("pairs"),
        py::arg("group"), py::arg("inputs"));
  m.def("_barrier", &barrier, py::arg("devices"));
  m.def("_device_global_id", [](int64_t d) { return runtime().device(d).id(); });
  m.def("_global_device_count", [] { return ttpu_runtime_global_device_count(runtime().capi()); });
  m.def(
      "_join_processes",
      [](const c10::intrusive_ptr<c10d::Store>& store, int node_id, int num_nodes) {
        TORCH_CHECK(num_nodes > 0 && node_id >= 0 && node_id < num_nodes, "_join_processes: node_id ", node_id,
                    " is not in 0..num_nodes (", num_nodes, ")");
        torchtpu::Distributed d;
        d.node_id = node_id;
        d.num_nodes = num_nodes;
        d.store = std::make_shared<C10dStore>(store, "torchtpu/pjrt/");
        return join_processes(std::move(d));
      },
      py::arg("store"), py::arg("node_id"), py::arg("num_nodes"),
      "Before the runtime starts: its PJRT client joins `num_nodes` processes as `node_id`, rendezvousing "
      "through the c10d `store`. False once the runtime has started.");
  m.def("_runtime_started", &runtime_started);
  m.def("_joined_node", &joined_node, "(node_id, num_nodes) the started runtime joined with, or None.");
  m.def("_set_first_default_device", [](int d) { return set_first_default_device(static_cast<c10::DeviceIndex>(d)); },
        "Before the runtime starts: the default device it starts with (modulo the device count).");
}

}  // namespace torchtpu_ext
