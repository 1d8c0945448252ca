// Mode guards restore the previous mode; streams and events work; fused mode
// (DEFER_AND_FUSE) computes the same values as eager.
#include "check.hpp"

#include <thread>

int main() {
  torchtpu::Runtime rt;

  check::run("ThreadModeGuard restores (no override before)", [&] {
    const torchtpu::Mode process = torchtpu::get_mode();
    check::ok(torchtpu::current_mode() == process, "no override at start");
    {
      torchtpu::ThreadModeGuard g(torchtpu::Mode::DeferAndFuse);
      check::ok(torchtpu::current_mode() == torchtpu::Mode::DeferAndFuse, "mode inside the guard");
      check::eq(g.previous(), int32_t{-1}, "guard restores 'no override'");
      {
        torchtpu::ThreadModeGuard inner(torchtpu::Mode::DeferNeverAndLaunchBlocking);
        check::ok(torchtpu::current_mode() == torchtpu::Mode::DeferNeverAndLaunchBlocking, "nested guard");
        check::eq(inner.previous(), static_cast<int32_t>(torchtpu::Mode::DeferAndFuse), "nested restores the override");
      }
      check::ok(torchtpu::current_mode() == torchtpu::Mode::DeferAndFuse, "nested guard restored");
    }
    check::ok(torchtpu::current_mode() == process, "outer guard restored");
    // The thread follows the process mode again: changing it shows through.
    torchtpu::set_mode(torchtpu::Mode::DeferNeverAndLaunchBlocking);
    check::ok(torchtpu::current_mode() == torchtpu::Mode::DeferNeverAndLaunchBlocking, "follows the process mode");
    torchtpu::set_mode(process);
  });

  check::run("ThreadModeGuard is per thread", [&] {
    torchtpu::ThreadModeGuard g(torchtpu::Mode::DeferAndFuse);
    torchtpu::Mode other = torchtpu::Mode::DeferAndFuse;
    std::thread t([&] { other = torchtpu::current_mode(); });
    t.join();
    check::ok(other == torchtpu::get_mode(), "another thread keeps the process mode");
  });

  check::run("fused mode computes hand values", [&] {
    torchtpu::Tensor a = rt.from_host(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
    torchtpu::Tensor b = rt.from_host(std::vector<float>{7, 8, 9, 10, 11, 12}, {3, 2});
    torchtpu::ThreadModeGuard g(torchtpu::Mode::DeferAndFuse);
    const uint64_t recorded_before = rt.fusion_stats().recorded_ops;
    torchtpu::Tensor c = torchtpu::relu(torchtpu::matmul(a, b) * 2.0 - 200.0);
    // 2 * [58, 64; 139, 154] - 200 = [-84, -72; 78, 108] -> relu
    check::ok(rt.pending_ops(0) > 0, "ops are pending before the read");
    check::near(c.to_host<float>(), {0, 0, 78, 108}, 1e-4f, "fused values");
    const torchtpu::FusionStats s = rt.fusion_stats();
    check::ok(s.recorded_ops >= recorded_before + 4, "ops were recorded");
    check::ok(s.flushes[TTPU_FLUSH_REASON_HOST_READ] >= 1, "the read flushed");
    check::eq(rt.pending_ops(0), std::size_t{0}, "nothing pending after the read");
    torchtpu::Tensor d = a + 1.0;
    rt.flush();
    check::near(d.to_host<float>(), {2, 3, 4, 5, 6, 7}, 0, "explicit flush");
  });

  check::run("streams", [&] {
    torchtpu::Stream def = rt.default_stream(0);
    check::eq(def.id(), int64_t{0}, "default stream id");
    check::eq(def.device(), int64_t{0}, "default stream device");
    torchtpu::Stream s = rt.create_stream(0);
    check::ok(s.id() > 0 && s != def, "created stream differs");
    check::ok(rt.current_stream(0) == def, "default is current");
    {
      torchtpu::StreamGuard g(rt, s);
      check::ok(rt.current_stream(0) == s, "guard makes s current");
      torchtpu::Tensor a = rt.from_host(std::vector<float>{1, 2}, {2});
      torchtpu::Tensor b = a * 3.0;
      s.synchronize();
      check::ok(s.query(), "idle after synchronize");
      check::near(b.to_host<float>(), {3, 6}, 0, "work on the stream");
    }
    check::ok(rt.current_stream(0) == def, "guard restored the default");
    rt.set_current_stream(s);
    rt.set_current_stream(torchtpu::Stream());  // empty: reset to defaults
    check::ok(rt.current_stream(0) == def, "reset with an empty stream");
  });

  check::run("events", [&] {
    torchtpu::Event never;
    check::ok(never.query(), "never-recorded event is done");
    never.synchronize();
    torchtpu::Stream s = rt.create_stream(0);
    torchtpu::Stream s2 = rt.create_stream(0);
    torchtpu::Event start;
    torchtpu::Event end;
    torchtpu::Tensor a = rt.from_host(std::vector<float>{1, 2, 3, 4}, {2, 2});
    torchtpu::Tensor c;
    {
      torchtpu::StreamGuard g(rt, s);
      start.record(s);
      c = torchtpu::matmul(a, a);
      end.record(s);
    }
    s2.wait_event(end);
    end.synchronize();
    check::ok(end.query() && start.query(), "both completed");
    check::ok(end.elapsed_ms(end) == 0.0, "elapsed to itself is 0");
    check::ok(start.elapsed_ms(end) >= 0.0, "elapsed is non-negative");
    check::near(c.to_host<float>(), {7, 10, 15, 22}, 0, "matmul on the stream");
    torchtpu::Event e = s2.record_event();
    e.synchronize();
    torchtpu::Event unrec;
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { (void)unrec.elapsed_ms(end); }, "elapsed of an unrecorded event");
  });

  return check::finish();
}
