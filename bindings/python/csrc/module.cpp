// torchtpu._C: what the Python package needs from the native backend. Loading
// it registers the "tpu" device's kernels, guard, allocator and hooks.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <torch/csrc/Generator.h>

#include "tpu.h"

namespace py = pybind11;

namespace torchtpu_ext {
// Defines the collective functions (csrc/collectives.cpp).
void register_collectives(py::module_& m);
}  // namespace torchtpu_ext

PYBIND11_MODULE(_C, m) {
  torchtpu_ext::register_collectives(m);
  m.doc() = "native PrivateUse1 backend of the PyTorch 'tpu' device";
  m.def("_runtime_address", [] { return reinterpret_cast<uintptr_t>(torchtpu_ext::runtime().capi()); },
        "Address of the process's ttpu_runtime_t (owned by the backend).");
  m.def("_device_count", [] { return static_cast<int>(torchtpu_ext::device_count()); });
  m.def("_current_device", [] { return static_cast<int>(torchtpu_ext::current_device()); });
  m.def("_set_device", [](int d) { torchtpu_ext::set_current_device(static_cast<c10::DeviceIndex>(d)); });
  m.def(
      "_default_generator",
      [](int d) {
        return py::reinterpret_steal<py::object>(
            THPGenerator_initDefaultGenerator(torchtpu_ext::default_generator(static_cast<c10::DeviceIndex>(d))));
      },
      "Device d's default torch.Generator (the one random ops use without generator=).");
  m.def("_set_cpu_fallback", &torchtpu_ext::set_cpu_fallback);
  m.def("_cpu_fallback_enabled", &torchtpu_ext::cpu_fallback_enabled);
  m.def("_fallback_counts", [] {
    py::dict d;
    for (const auto& [op, n] : torchtpu_ext::fallback_counts()) d[py::str(op)] = n;
    return d;
  });
}
