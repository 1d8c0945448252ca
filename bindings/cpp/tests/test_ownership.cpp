// Ownership of the move-only wrappers: moves transfer the handle, the
// moved-from owner is empty (and using it throws), release() hands the
// handle over, and nothing is freed twice (run under ASan with
// -DTORCHTPU_SANITIZE=ON).
#include "check.hpp"

#include <utility>

int main() {
  torchtpu::Runtime rt;

  check::run("tensor move ctor", [&] {
    torchtpu::Tensor a = rt.from_host(std::vector<float>{1, 2, 3}, {3});
    ttpu_tensor_t* h = a.capi();
    torchtpu::Tensor b(std::move(a));
    check::ok(a.capi() == nullptr && !a, "moved-from tensor is empty");
    check::ok(b.capi() == h && static_cast<bool>(b), "moved-to tensor owns the handle");
    check::eq(b.to_host<float>(), std::vector<float>({1, 2, 3}), "moved-to tensor reads back");
  });

  check::run("tensor move assign over a live handle", [&] {
    torchtpu::Tensor a = rt.from_host(std::vector<float>{1, 2}, {2});
    torchtpu::Tensor b = rt.from_host(std::vector<float>{7, 8, 9}, {3});
    b = std::move(a);  // b's old handle is destroyed here
    check::ok(!a, "moved-from is empty");
    check::eq(b.shape(), std::vector<int64_t>({2}), "b now holds a");
    torchtpu::Tensor& self = b;
    b = std::move(self);  // self-move keeps the handle
    check::ok(static_cast<bool>(b), "self-move keeps the handle");
  });

  check::run("empty tensor use throws", [&] {
    torchtpu::Tensor a = rt.from_host(std::vector<float>{1}, {1});
    torchtpu::Tensor b = std::move(a);
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { (void)a.shape(); }, "shape of moved-from");
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { (void)a.to_host<float>(); }, "to_host of moved-from");
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { (void)(a + b); }, "op on moved-from");
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { (void)torchtpu::call(rt, "aten::neg", a); }, "call with moved-from");
    torchtpu::Tensor empty;
    check::ok(!empty && empty.capi() == nullptr, "default tensor is empty");
  });

  check::run("tensor release and retain", [&] {
    torchtpu::Tensor a = rt.from_host(std::vector<int32_t>{4, 5}, {2});
    torchtpu::Tensor r = a.retain();
    check::ok(r.capi() != a.capi() && r.same_storage(a), "retain: new handle, same storage");
    ttpu_tensor_t* raw = a.release();
    check::ok(!a && raw != nullptr, "release empties the owner");
    ttpu_tensor_destroy(raw);  // the caller owns it now
    check::eq(r.to_host<int32_t>(), std::vector<int32_t>({4, 5}), "retained handle outlives the released one");
  });

  check::run("views share the storage; rng state round trip", [&] {
    torchtpu::Tensor a = rt.from_host(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
    torchtpu::Tensor t = a.view({3, 2}, {1, 3}, 0);
    check::ok(t.same_storage(a) && t.storage_numel() == 6, "view: same storage");
    check::eq(t.to_host<float>(), std::vector<float>({1, 4, 2, 5, 3, 6}), "transposed view");
    torchtpu::Tensor row = a.view({3}, {1}, 3);
    (void)torchtpu::call(rt, "aten::mul_.Scalar", row, torchtpu::Scalar(10.0));
    check::eq(a.to_host<float>(), std::vector<float>({1, 2, 3, 40, 50, 60}), "write through a view");
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { (void)a.view({4}, {1}, 3); }, "view past the storage");
    rt.set_rng_state(0, 9, 2);
    check::ok(rt.rng_state(0) == std::pair<uint64_t, uint64_t>(9, 2), "rng state round trip");
    rt.reset_peak_memory(0);
    check::ok(rt.memory(0).second == rt.memory(0).first, "peak reset to live bytes");
  });

  check::run("memory stats count a tensor's bytes", [&] {
    rt.reset_accumulated_memory(0);
    const torchtpu::MemoryStats s0 = rt.memory_stats(0);
    {
      torchtpu::Tensor t = rt.from_host(std::vector<float>(256, 1.0f), {256});
      const torchtpu::MemoryStats s = rt.memory_stats(0);
      check::eq(s.live_bytes - s0.live_bytes, int64_t{1024}, "256 floats are live");
      check::eq(s.allocated_buffers, int64_t{1}, "one buffer allocated");
    }
    const torchtpu::MemoryStats s = rt.memory_stats(0);
    check::eq(s.live_bytes, s0.live_bytes, "freed with the tensor");
    check::eq(s.freed_bytes, int64_t{1024}, "freed total");
    const torchtpu::MemoryInfo m = rt.memory_info(0);
    check::ok(m.total_bytes > 0 && m.free_bytes >= 0 && m.free_bytes <= m.total_bytes, "free <= total");
    check::throws(TTPU_CODE_OUT_OF_RANGE, [&] { (void)rt.memory_stats(99); }, "bad device");
  });

  check::run("vector of tensors (moves on growth)", [&] {
    std::vector<torchtpu::Tensor> ts;
    for (int i = 0; i < 20; ++i) ts.push_back(rt.from_host(std::vector<int64_t>{i}, {1}));
    for (int i = 0; i < 20; ++i) check::eq(ts[static_cast<std::size_t>(i)].to_host<int64_t>()[0], int64_t{i}, "element");
    ts.erase(ts.begin() + 3);
    check::eq(ts[3].to_host<int64_t>()[0], int64_t{4}, "after erase");
  });

  check::run("runtime, stream, event moves", [&] {
    torchtpu::Runtime r2;
    ttpu_runtime_t* h = r2.capi();
    torchtpu::Runtime r3(std::move(r2));
    check::ok(!r2 && r3.capi() == h, "runtime move ctor");
    torchtpu::Runtime r4;
    r4 = std::move(r3);
    check::ok(!r3 && r4.capi() == h, "runtime move assign");
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { r3.synchronize(); }, "moved-from runtime");

    torchtpu::Stream s = r4.create_stream(0);
    torchtpu::Stream s2(std::move(s));
    check::ok(!s && static_cast<bool>(s2), "stream move");
    check::eq(s.device(), int64_t{-1}, "moved-from stream device is -1");
    s = r4.default_stream(0);
    check::ok(static_cast<bool>(s) && s.id() == 0, "stream move assign into moved-from");

    torchtpu::Event e;
    torchtpu::Event e2(std::move(e));
    check::ok(!e && static_cast<bool>(e2), "event move");
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { (void)e.query(); }, "moved-from event");
    ttpu_event_destroy(e2.release());
  });

  check::run("tensor outlives its runtime", [&] {
    torchtpu::Tensor t;
    {
      torchtpu::Runtime r;
      t = r.from_host(std::vector<float>{1}, {1});
    }
    check::ok(static_cast<bool>(t), "still owned; destroyed after the runtime without a double free");
  });

  check::run("handles outlive a shutdown", [&] {
    torchtpu::Runtime r;
    torchtpu::Tensor t = r.from_host(std::vector<float>{1, 2}, {2});
    torchtpu::Tensor u = torchtpu::call1(r, "aten::add.Tensor", t, t);  // in flight
    torchtpu::Stream s = r.create_stream(0);
    r.shutdown(std::chrono::seconds(60));
    r.shutdown();  // a second one is a no-op
    check::throws(TTPU_CODE_FAILED_PRECONDITION, [&] { (void)u.to_host<float>(); }, "read after shutdown");
    check::throws(TTPU_CODE_FAILED_PRECONDITION, [&] { s.synchronize(); }, "stream after shutdown");
    check::eq(r.device_count() > 0, true, "device count needs no device");
    // t, u, s and r are destroyed here, after the shutdown, without the device.
  });

  return check::finish();
}
