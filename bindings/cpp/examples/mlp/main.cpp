// A 2-layer MLP forward pass (batch 4, 8 -> 16 (relu) -> 3) with fixed
// deterministic weights, run through libtorchtpu and checked against a plain
// C++ loop.
#include <torchtpu/torchtpu.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

namespace {

constexpr int kBatch = 4;
constexpr int kIn = 8;
constexpr int kHidden = 16;
constexpr int kOut = 3;

/// Deterministic values in [-scale, scale): a fixed linear-congruential
/// sequence, the same on every run and platform.
std::vector<float> fill(std::size_t n, uint32_t seed, float scale) {
  std::vector<float> v(n);
  uint32_t s = seed;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = (static_cast<float>(s >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f) * scale;
  }
  return v;
}

/// y[b, o] = sum_i x[b, i] * w[o, i] + bias[o], optionally relu'd.
std::vector<float> linear_ref(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& bias,
                              int batch, int in, int out, bool relu) {
  std::vector<float> y(static_cast<std::size_t>(batch * out));
  for (int b = 0; b < batch; ++b) {
    for (int o = 0; o < out; ++o) {
      double acc = bias[static_cast<std::size_t>(o)];
      for (int i = 0; i < in; ++i) {
        acc += static_cast<double>(x[static_cast<std::size_t>(b * in + i)]) * w[static_cast<std::size_t>(o * in + i)];
      }
      const float v = static_cast<float>(acc);
      y[static_cast<std::size_t>(b * out + o)] = relu ? std::max(v, 0.0f) : v;
    }
  }
  return y;
}

}  // namespace

int main() {
  try {
    torchtpu::Runtime rt;
    std::printf("torchtpu %s on PJRT platform '%s'\n", torchtpu::version().c_str(), rt.platform_name().c_str());
    for (const torchtpu::Device& d : rt.devices()) {
      std::printf("  tpu:%lld  id=%d  kind=%s  %s\n", static_cast<long long>(d.index()), d.id(), d.kind().c_str(),
                  d.description().c_str());
    }

    const std::vector<float> x = fill(kBatch * kIn, 1, 1.0f);
    const std::vector<float> w1 = fill(kHidden * kIn, 2, 0.35f);
    const std::vector<float> b1 = fill(kHidden, 3, 0.1f);
    const std::vector<float> w2 = fill(kOut * kHidden, 4, 0.25f);
    const std::vector<float> b2 = fill(kOut, 5, 0.1f);

    const torchtpu::Tensor tx = rt.from_host(x, {kBatch, kIn});
    const torchtpu::Tensor tw1 = rt.from_host(w1, {kHidden, kIn});
    const torchtpu::Tensor tb1 = rt.from_host(b1, {kHidden});
    const torchtpu::Tensor tw2 = rt.from_host(w2, {kOut, kHidden});
    const torchtpu::Tensor tb2 = rt.from_host(b2, {kOut});

    const torchtpu::Tensor h = torchtpu::relu(torchtpu::linear(tx, tw1, tb1));
    const torchtpu::Tensor y = torchtpu::linear(h, tw2, tb2);
    const std::vector<float> got = y.to_host<float>();

    const std::vector<float> want =
        linear_ref(linear_ref(x, w1, b1, kBatch, kIn, kHidden, true), w2, b2, kBatch, kHidden, kOut, false);

    std::printf("\nMLP %d -> %d (relu) -> %d, batch %d, output shape [%lld, %lld]\n", kIn, kHidden, kOut, kBatch,
                static_cast<long long>(y.shape()[0]), static_cast<long long>(y.shape()[1]));
    float max_diff = 0.0f;
    for (std::size_t i = 0; i < got.size(); ++i) max_diff = std::max(max_diff, std::fabs(got[i] - want[i]));
    for (int b = 0; b < kBatch; ++b) {
      std::printf("  row %d: ", b);
      for (int o = 0; o < kOut; ++o) std::printf("%9.5f ", static_cast<double>(got[static_cast<std::size_t>(b * kOut + o)]));
      std::printf("\n");
    }
    const bool ok = got.size() == want.size() && max_diff < 1e-4f;
    std::printf("max |torchtpu - reference| = %.3g\n%s\n", static_cast<double>(max_diff), ok ? "OK" : "MISMATCH");
    return ok ? 0 : 1;
  } catch (const torchtpu::Error& e) {
    std::fprintf(stderr, "torchtpu error (code %d): %s\n", static_cast<int>(e.code()), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
