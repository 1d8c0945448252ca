// C ABI errors surface as torchtpu::Error with the ABI's code and message.
#include "check.hpp"

#include <string>

int main() {
  torchtpu::Runtime rt;
  torchtpu::Tensor a = rt.from_host(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  torchtpu::Tensor b = rt.from_host(std::vector<float>{1, 2, 3, 4}, {2, 2});

  check::run("unknown op is NOT_FOUND", [&] {
    check::throws(TTPU_CODE_NOT_FOUND, [&] { (void)torchtpu::call(rt, "aten::no_such_op", a); }, "unknown op");
    try {
      (void)torchtpu::call(rt, "aten::no_such_op", a);
    } catch (const torchtpu::Error& e) {
      check::ok(std::string(e.what()).find("no_such_op") != std::string::npos, "message names the op");
    }
  });

  check::run("shape mismatch is INVALID_ARGUMENT", [&] {
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { (void)(a + b); }, "add [2,3] + [2,2]");
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { (void)torchtpu::matmul(a, a); }, "matmul [2,3] @ [2,3]");
    check::throws(TTPU_CODE_INVALID_ARGUMENT,
                  [&] { (void)rt.from_host(std::vector<float>{1, 2, 3}, {2, 2}); }, "from_host size mismatch");
  });

  check::run("device out of range is OUT_OF_RANGE", [&] {
    const auto n = static_cast<int64_t>(rt.device_count());
    check::throws(TTPU_CODE_OUT_OF_RANGE, [&] { (void)rt.device(n); }, "device(count)");
    check::throws(TTPU_CODE_OUT_OF_RANGE, [&] { (void)rt.from_host(std::vector<float>{1}, {1}, n + 5); },
                  "from_host on a bad device");
    check::throws(TTPU_CODE_OUT_OF_RANGE, [&] { (void)rt.create_stream(n); }, "create_stream on a bad device");
  });

  check::run("to_host with the wrong host type", [&] {
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { (void)a.to_host<double>(); }, "float32 read as double");
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { (void)a.to_host<int32_t>(); }, "float32 read as int32");
  });

  check::run("call1 on a multi-result op", [&] {
    check::throws(TTPU_CODE_INVALID_ARGUMENT,
                  [&] { (void)torchtpu::call1(rt, "aten::split.Tensor", a, 1, 1); }, "split returns 3");
  });

  check::run("wrongly typed argument", [&] {
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { (void)torchtpu::call(rt, "aten::add.Tensor", a, "text"); },
                  "string where a tensor goes");
  });

  check::run("runtime options are checked", [&] {
    check::throws(TTPU_CODE_INVALID_ARGUMENT, [&] { torchtpu::Runtime bad(std::string(), -1); },
                  "negative cpu_device_count");
  });

  return check::finish();
}
