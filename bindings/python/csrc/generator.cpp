// torch.Generator for "tpu": a c10::GeneratorImpl over a runtime generator.
//
// The runtime owns the random state (a seed and the number of draws since
// it was set, see torchtpu::Generator); this class only translates
// PyTorch's generator interface to it. `torch.Generator(device="tpu")` gets
// an independent generator; `torch.tpu.default_generators[i]` and the
// generator ops use without `generator=` are handles to device i's default,
// so torch.manual_seed, torch.tpu.get_rng_state and a default generator's
// own methods all act on the same state.
#include "tpu.h"

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/core/TensorImpl.h>

#include <cstring>
#include <mutex>
#include <vector>

namespace torchtpu_ext {

namespace {

// The state as PyTorch sees it (`get_state`/`set_state`, and so
// `torch.tpu.get_rng_state`): 16 bytes, the seed then the draw count, both
// native-endian uint64.
constexpr size_t kStateBytes = 2 * sizeof(uint64_t);

struct TpuGeneratorImpl final : c10::GeneratorImpl {
  TpuGeneratorImpl(c10::DeviceIndex device, torchtpu::Generator g)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        gen(std::move(g)) {}

  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  void set_current_seed(uint64_t seed) override {
    checked([&] { gen.manual_seed(seed); });
  }
  uint64_t current_seed() const override {
    return checked([&] { return gen.initial_seed(); });
  }
  // The offset is the number of draws since seeding: setting it replays or
  // skips draws exactly as Philox offsets do on CUDA.
  void set_offset(uint64_t offset) override {
    checked([&] { gen.set_state(gen.initial_seed(), offset); });
  }
  uint64_t get_offset() const override {
    return checked([&] { return gen.state().second; });
  }
  uint64_t seed() override {
    const uint64_t s = c10::detail::getNonDeterministicRandom();
    set_current_seed(s);
    return s;
  }

  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    const auto [seed, calls] = checked([&] { return gen.state(); });
    at::Tensor t = at::empty({static_cast<int64_t>(kStateBytes)}, at::device(at::kCPU).dtype(at::kByte));
    std::memcpy(t.data_ptr(), &seed, sizeof seed);
    std::memcpy(static_cast<uint8_t*>(t.data_ptr()) + sizeof seed, &calls, sizeof calls);
    return t.getIntrusivePtr();
  }
  void set_state(const c10::TensorImpl& state) override {
    TORCH_CHECK(state.device().is_cpu() && state.dtype() == caffe2::TypeMeta::Make<uint8_t>() &&
                    state.is_contiguous() && static_cast<size_t>(state.numel()) == kStateBytes,
                "a tpu generator state is a contiguous CPU uint8 tensor of ", kStateBytes,
                " bytes (from get_state), got ", state.dtype(), " of ", state.numel(), " elements on ",
                state.device());
    uint64_t seed = 0;
    uint64_t calls = 0;
    const auto* bytes = static_cast<const uint8_t*>(state.data());
    std::memcpy(&seed, bytes, sizeof seed);
    std::memcpy(&calls, bytes + sizeof seed, sizeof calls);
    checked([&] { gen.set_state(seed, calls); });
  }

  torchtpu::Generator gen;

 private:
  TpuGeneratorImpl* clone_impl() const override {
    return checked([&] { return new TpuGeneratorImpl(device_.index(), gen.clone_state()); });
  }
};

c10::DeviceIndex checked_index(c10::DeviceIndex device) {
  const c10::DeviceIndex d = device < 0 ? current_device() : device;
  TORCH_CHECK(d >= 0 && d < device_count(), "invalid tpu device index ", static_cast<int>(d), " for a generator: ",
              static_cast<int>(device_count()), " tpu devices are available");
  return d;
}

}  // namespace

const at::Generator& default_generator(c10::DeviceIndex device) {
  // One per device, made on first use and kept for the process, as CUDA's
  // default generators are (at::Generator references must stay valid).
  static std::mutex mu;
  static auto* generators = new std::vector<at::Generator>();
  const c10::DeviceIndex d = checked_index(device);
  std::lock_guard<std::mutex> lock(mu);
  if (generators->empty()) generators->resize(static_cast<size_t>(device_count()));
  at::Generator& g = (*generators)[static_cast<size_t>(d)];
  if (!g.defined()) {
    try {
      g = at::make_generator<TpuGeneratorImpl>(d, torchtpu::Generator::default_for(runtime(), d));
    } catch (const torchtpu::Error& e) {
      rethrow(e);
    }
  }
  return g;
}

at::Generator new_generator(c10::DeviceIndex device) {
  const c10::DeviceIndex d = checked_index(device);
  try {
    return at::make_generator<TpuGeneratorImpl>(
        d, torchtpu::Generator::create(runtime(), d, c10::detail::getNonDeterministicRandom()));
  } catch (const torchtpu::Error& e) {
    rethrow(e);
  }
}

const torchtpu::Generator& runtime_generator(const at::Generator& g, const std::string& op) {
  TORCH_CHECK(g.defined() && g.device().is_privateuseone(), op, ": expected a generator of a tpu device, got one of ",
              g.defined() ? g.device().str() : std::string("no device"),
              " (make it with torch.Generator(device=\"tpu\"))");
  return g.get<TpuGeneratorImpl>()->gen;
}

}  // namespace torchtpu_ext
