// Collectives on tpu tensors, for torch.tpu.comm and the `tpu` process
// group: each call hands the runtime one tensor per member device and wraps
// the outputs as new tpu tensors. Semantics live in the runtime.
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
}

}  // namespace torchtpu_ext
