// Collectives across the CPU plugin's 4 devices through the C++ wrapper, in
// strict and fused mode, against values computed here; a collective on a
// side stream (StreamGuard); errors thrown as `Error`. And a runtime that
// joins processes (`Distributed`): the wrapper's key-value adapter and who
// owns the store.
#include "check.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace {

constexpr int kDevices = 4;

// Rank r holds {r + 1, -(r + 1), 10 * r}.
std::vector<torchtpu::Tensor> inputs(const torchtpu::Runtime& rt) {
  std::vector<torchtpu::Tensor> xs;
  for (int r = 0; r < kDevices; ++r) {
    xs.push_back(rt.from_host(std::vector<float>{float(r + 1), -float(r + 1), 10.0f * r}, {3}, r));
  }
  return xs;
}

// A store in memory that counts its users' calls.
class MapStore final : public torchtpu::KeyValueStore {
 public:
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) return it->second;
    if (timeout.count() < 0) throw torchtpu::Error(TTPU_CODE_NOT_FOUND, "no " + key);
    if (key == "boom") throw std::runtime_error("socket closed");
    throw torchtpu::Error(TTPU_CODE_DEADLINE_EXCEEDED, "waited " + std::to_string(timeout.count()) + " ms for " + key);
  }
  void put(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    map_[key] = value;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> map_;
};

// Calls the adapter as the runtime does, through the C declarations.
std::string adapter_get(void* user, const std::string& key, int64_t timeout_ms, ttpu_code* code, std::string* msg) {
  char* value = nullptr;
  size_t size = 0;
  ttpu_kv_value_deleter_t deleter = nullptr;
  ttpu_error_t* e = torchtpu::detail::KvAdapter::get(user, key.data(), key.size(), timeout_ms, &value, &size, &deleter);
  *code = ttpu_error_code(e);
  *msg = ttpu_error_message(e);
  ttpu_error_destroy(e);
  if (e != nullptr) return std::string();
  std::string out(value, size);
  deleter(value);
  return out;
}

}  // namespace

int main() {
  check::run("a runtime that joins processes: the store adapter", [&] {
    auto store = std::make_shared<MapStore>();
    void* user = new std::shared_ptr<torchtpu::KeyValueStore>(store);
    const std::string value("a\0b", 3);  // values are bytes, not C strings
    check::ok(torchtpu::detail::KvAdapter::put(user, "k", 1, value.data(), value.size()) == nullptr, "put");
    ttpu_code code = TTPU_CODE_OK;
    std::string msg;
    check::eq(adapter_get(user, "k", 10, &code, &msg), value, "get returns the bytes");
    check::eq(code, TTPU_CODE_OK, "get succeeds");
    adapter_get(user, "missing", -1, &code, &msg);
    check::eq(code, TTPU_CODE_NOT_FOUND, "try_get of an absent key");
    adapter_get(user, "missing", 25, &code, &msg);
    check::eq(code, TTPU_CODE_DEADLINE_EXCEEDED, "get past its timeout");
    check::eq(msg, std::string("waited 25 ms for missing"), "the store's message");
    adapter_get(user, "boom", 25, &code, &msg);
    check::eq(code, TTPU_CODE_INTERNAL, "a std::exception is INTERNAL");
    check::eq(msg, std::string("socket closed"), "and keeps its message");
    check::eq(store.use_count(), 2L, "the adapter holds a reference");
    torchtpu::detail::KvAdapter::release(user);
    check::eq(store.use_count(), 1L, "release drops it");
  });

  check::run("a runtime that joins processes: node 0 of 1", [&] {
    auto store = std::make_shared<MapStore>();
    {
      torchtpu::Distributed d;
      d.store = store;
      const long before = store.use_count();
      torchtpu::Runtime joined("", 2, d);
      check::eq(joined.device_count(), std::size_t{2}, "the client starts");
      check::eq(store.use_count(), before + 1, "the runtime holds the store");
      std::vector<torchtpu::Tensor> xs;
      for (int d = 0; d < 2; ++d) xs.push_back(joined.from_host(std::vector<float>{1, 2}, {2}, d));
      check::near(torchtpu::all_reduce(xs)[1].to_host<float>(), {2, 4}, 0, "and computes");
    }
    check::eq(store.use_count(), 1L, "released with the runtime");
    torchtpu::Distributed bad;
    bad.store = store;
    bad.node_id = 3;
    bad.num_nodes = 2;
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { torchtpu::Runtime r("", 2, bad); }, "node outside the nodes");
    check::eq(store.use_count(), 2L, "a failed creation releases the store (`bad` holds the other reference)");
  });

  torchtpu::Runtime rt("", kDevices);

  for (int mode : {0, 2}) {
    const std::string m = mode == 0 ? " strict" : " fused";
    check::run(("all_reduce" + m).c_str(), [&] {
      torchtpu::ThreadModeGuard guard(static_cast<torchtpu::Mode>(mode));
      std::vector<torchtpu::Tensor> out = torchtpu::all_reduce(inputs(rt));
      check::eq(out.size(), std::size_t{kDevices}, "one output per rank");
      for (const torchtpu::Tensor& t : out) check::near(t.to_host<float>(), {10, -10, 60}, 0, "sum");
      check::near(torchtpu::all_reduce(inputs(rt), torchtpu::ReduceOp::Avg)[3].to_host<float>(), {2.5f, -2.5f, 15},
                  1e-6f, "avg");
      check::near(torchtpu::all_reduce(inputs(rt), torchtpu::ReduceOp::Min)[1].to_host<float>(), {1, -4, 0}, 0, "min");
      check::near(torchtpu::all_reduce(inputs(rt), torchtpu::ReduceOp::Prod)[0].to_host<float>(), {24, 24, 0}, 0,
                  "prod");
    });
    check::run(("gather, scatter, broadcast, all_to_all, permute" + m).c_str(), [&] {
      torchtpu::ThreadModeGuard guard(static_cast<torchtpu::Mode>(mode));
      std::vector<torchtpu::Tensor> g = torchtpu::all_gather(inputs(rt));
      check::eq(g[2].shape(), std::vector<int64_t>{12}, "gathered shape");
      check::near(g[2].to_host<float>(), {1, -1, 0, 2, -2, 10, 3, -3, 20, 4, -4, 30}, 0, "gathered");
      std::vector<torchtpu::Tensor> eights;
      for (int r = 0; r < kDevices; ++r) {
        eights.push_back(rt.from_host(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}, {4, 2}, r));
      }
      std::vector<torchtpu::Tensor> rs = torchtpu::reduce_scatter(eights);
      check::eq(rs[3].shape(), std::vector<int64_t>{1, 2}, "scattered shape");
      check::near(rs[3].to_host<float>(), {24, 28}, 0, "scattered");
      check::near(torchtpu::broadcast(inputs(rt), 2)[0].to_host<float>(), {3, -3, 20}, 0, "broadcast");
      std::vector<torchtpu::Tensor> a2a = torchtpu::all_to_all(eights);
      check::near(a2a[1].to_host<float>(), {2, 3, 2, 3, 2, 3, 2, 3}, 0, "all_to_all");
      std::vector<torchtpu::Tensor> p = torchtpu::permute(inputs(rt), {{1, 0}, {0, 1}});
      check::near(p[0].to_host<float>(), {2, -2, 10}, 0, "recv from 1");
      check::near(p[2].to_host<float>(), {0, 0, 0}, 0, "nothing received");
    });
  }

  check::run("collective on a side stream", [&] {
    std::vector<torchtpu::Stream> side;
    for (int d = 0; d < kDevices; ++d) side.push_back(rt.create_stream(d));
    std::vector<torchtpu::Tensor> out;
    {
      torchtpu::StreamGuard g0(rt, side[0]), g1(rt, side[1]), g2(rt, side[2]), g3(rt, side[3]);
      out = torchtpu::all_reduce(inputs(rt), torchtpu::ReduceOp::Max);
    }
    for (torchtpu::Stream& s : side) s.synchronize();
    check::near(out[0].to_host<float>(), {4, -1, 30}, 0, "max");
    torchtpu::barrier(rt, {0, 1, 2, 3});
  });

  check::run("collective errors", [&] {
    std::vector<torchtpu::Tensor> mixed;
    mixed.push_back(rt.from_host(std::vector<float>{1, 2}, {2}, 0));
    mixed.push_back(rt.from_host(std::vector<float>{1, 2, 3}, {3}, 1));
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { torchtpu::all_reduce(mixed); }, "shape mismatch");
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { torchtpu::all_reduce({}); }, "no inputs");
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { torchtpu::broadcast(inputs(rt), 7); }, "bad root");
    check::throws(TTPU_CODE_OUT_OF_RANGE, [&] { torchtpu::barrier(rt, {0, 8}); }, "bad device");
  });

  return check::finish();
}
