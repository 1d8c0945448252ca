// The example plugins, dropped into TORCHTPU_PLUGIN_PATH (CTest sets it to
// target/plugins): listed, their ops called through `call` in strict and
// fused mode against values computed here, a plugin policy selected by name,
// and plugin errors thrown as `Error`.
#include "check.hpp"

#include <cmath>
#include <string>

namespace {

std::vector<float> rms_norm_ref(const std::vector<float>& x, const std::vector<float>& w, double eps) {
  const std::size_t d = w.size();
  std::vector<float> out(x.size());
  for (std::size_t r = 0; r < x.size() / d; ++r) {
    double ms = 0;
    for (std::size_t j = 0; j < d; ++j) ms += double(x[r * d + j]) * x[r * d + j];
    const double inv = 1.0 / std::sqrt(ms / double(d) + eps);
    for (std::size_t j = 0; j < d; ++j) out[r * d + j] = float(x[r * d + j] * inv * w[j]);
  }
  return out;
}

double sigmoid(double a) { return 1.0 / (1.0 + std::exp(-a)); }

}  // namespace

int main() {
  torchtpu::Runtime rt;

  check::run("plugins from TORCHTPU_PLUGIN_PATH", [&] {
    const std::vector<torchtpu::Plugin> ps = torchtpu::plugins();
    check::eq(ps.size(), std::size_t{3}, "three example plugins");
    bool swiglu = false;
    for (const torchtpu::Plugin& p : ps) {
      check::eq(p.abi_major, uint32_t{TTPU_PLUGIN_ABI_MAJOR}, "ABI major");
      if (p.name == "swiglu") {
        swiglu = true;
        check::eq(p.ops.size(), std::size_t{2}, "swiglu ops");
        check::eq(p.ops[0].backward, std::string("swiglu::swiglu_backward"), "backward op");
      }
    }
    check::ok(swiglu, "swiglu is listed");
  });

  const std::vector<float> xs = {0.5f, -1.5f, 2, 3, -0.25f, 1, 4, -2};
  const std::vector<float> ws = {2, 1, -0.5f, 0.75f};
  for (int mode : {0, 2}) {
    check::run(mode == 0 ? "rms_norm strict" : "rms_norm fused", [&] {
      torchtpu::ThreadModeGuard guard(static_cast<torchtpu::Mode>(mode));
      torchtpu::Tensor x = rt.from_host(xs, {2, 4});
      torchtpu::Tensor w = rt.from_host(ws, {4});
      torchtpu::Tensor y = torchtpu::call1(rt, "rms_norm::rms_norm", x, w, 1e-5);
      check::near(y.to_host<float>(), rms_norm_ref(xs, ws, 1e-5), 1e-5f, "rms_norm");
    });
    check::run(mode == 0 ? "swiglu strict" : "swiglu fused", [&] {
      torchtpu::ThreadModeGuard guard(static_cast<torchtpu::Mode>(mode));
      torchtpu::Tensor a = rt.from_host(xs, {8});
      torchtpu::Tensor b = rt.from_host(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, {8});
      std::vector<float> want;
      for (std::size_t i = 0; i < xs.size(); ++i) want.push_back(float(xs[i] * sigmoid(xs[i]) * (i + 1)));
      check::near(torchtpu::call1(rt, "swiglu::swiglu", a, b).to_host<float>(), want, 1e-5f, "swiglu");
    });
  }

  check::run("plugin policy and errors", [&] {
    rt.set_fusion_policy("byte_budget::byte_budget?max_bytes=64");
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { rt.set_fusion_policy("missing::policy"); }, "unknown policy");
    torchtpu::Tensor x = rt.from_host(xs, {2, 4});
    torchtpu::Tensor bad = rt.from_host(std::vector<float>{1, 2, 3}, {3});
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { torchtpu::call1(rt, "rms_norm::rms_norm", x, bad); }, "bad weight");
    check::throws(TTPU_CODE_NOT_FOUND, [&] { torchtpu::load_plugins("/nonexistent/dir"); }, "missing dir");
    rt.set_fusion_policy("fuse_all");
  });

  return check::finish();
}
