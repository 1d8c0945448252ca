// torchtpu::Generator: explicit generators passed to random ops, device
// defaults shared with Runtime's seed calls, state round trips, clones,
// ownership (move, release, empty handles), in strict and fused mode.
#include "check.hpp"

#include <utility>

namespace {

std::vector<float> rand(const torchtpu::Runtime& rt, const torchtpu::Generator& g, int64_t n = 32) {
  return torchtpu::call1(rt, "aten::rand.generator", std::vector<int64_t>{n}, g).to_host<float>();
}

std::vector<float> rand_default(const torchtpu::Runtime& rt, int64_t n = 32) {
  return torchtpu::call1(rt, "aten::rand.generator", std::vector<int64_t>{n}, std::nullopt).to_host<float>();
}

void body(const torchtpu::Runtime& rt, const std::string& mode) {
  auto g = torchtpu::Generator::create(rt, 0, 21);
  auto d = torchtpu::Generator::default_for(rt, 0);
  check::eq(g.device(), int64_t{0}, mode + ": device");
  check::eq(g.initial_seed(), uint64_t{21}, mode + ": initial seed");

  // The default seeded alike draws the same numbers; neither advances the other.
  rt.manual_seed(21);
  const std::vector<float> a = rand(rt, g);
  check::ok(g.state() == std::make_pair(uint64_t{21}, uint64_t{1}), mode + ": g advanced");
  check::ok(d.state() == std::make_pair(uint64_t{21}, uint64_t{0}), mode + ": default did not");
  check::ok(rand_default(rt) == a, mode + ": same seed, same draws");
  check::ok(rt.rng_state(0) == d.state(), mode + ": default_for names the runtime's default");
  for (float x : a) check::ok(x >= 0.0f && x < 1.0f, mode + ": uniform in [0, 1)");

  // get/set state replays; a clone copies the state and goes its own way.
  const auto s = g.state();
  const std::vector<float> b = rand(rt, g);
  g.set_state(s);
  check::ok(rand(rt, g) == b, mode + ": set_state replays");
  g.set_state(s);
  torchtpu::Generator c = g.clone_state();
  check::ok(rand(rt, c) == b, mode + ": the clone draws what g would");
  check::ok(g.state() == s, mode + ": the clone's draws leave g alone");
  auto other = torchtpu::Generator::create(rt, 0, 22);
  check::ok(rand(rt, other) != a, mode + ": another seed, other draws");
  g.manual_seed(21);
  check::ok(rand(rt, g) == a, mode + ": manual_seed restarts");
}

}  // namespace

int main() {
  torchtpu::Runtime rt;

  check::run("generators in strict mode", [&] {
    torchtpu::ThreadModeGuard m(torchtpu::Mode::DeferNever);
    body(rt, "strict");
  });
  check::run("generators in fused mode", [&] {
    torchtpu::ThreadModeGuard m(torchtpu::Mode::DeferAndFuse);
    body(rt, "fused");
  });

  check::run("ownership and errors", [&] {
    auto g = torchtpu::Generator::create(rt, 1, 5);
    torchtpu::Generator moved = std::move(g);
    check::ok(!g && moved, "moved-from is empty");
    check::eq(g.device(), int64_t{-1}, "empty device is -1");
    check::eq(moved.device(), int64_t{1}, "moved keeps the device");
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { g.state(); }, "state of an empty handle");
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { rand(rt, g); }, "an empty generator argument");
    check::throws(TTPU_CODE_OUT_OF_RANGE, [&] { torchtpu::Generator::create(rt, 99, 0); }, "bad device");
    check::throws(TTPU_CODE_OUT_OF_RANGE, [&] { torchtpu::Generator::default_for(rt, 99); }, "bad default device");
    check::throws(
        TTPU_CODE_INVALID_ARGUMENT,
        [&] { torchtpu::call1(rt, "aten::rand", std::vector<int64_t>{2}, moved); },
        "a generator where a dtype goes");
    // release() hands the handle over; the generator outlives it.
    auto d = torchtpu::Generator::default_for(rt, 0);
    ttpu_generator_t* raw = d.release();
    check::ok(!d && raw != nullptr, "released");
    torchtpu::Generator back(raw);
    back.set_state(3, 4);
    check::ok(rt.rng_state(0) == std::make_pair(uint64_t{3}, uint64_t{4}), "the released handle still names the default");
  });

  return check::finish();
}
