// Numerical results against values computed by hand, through the
// operators, the helpers and the generic call with every argument kind.
#include "check.hpp"

#include <optional>
#include <string>

int main() {
  torchtpu::Runtime rt;

  check::run("devices", [&] {
    const std::vector<torchtpu::Device> devs = rt.devices();
    check::ok(!devs.empty(), "at least one device");
    for (std::size_t i = 0; i < devs.size(); ++i) {
      check::eq(devs[i].index(), static_cast<int64_t>(i), "device index");
      check::ok(!devs[i].kind().empty(), "device kind");
    }
  });

  check::run("from_host metadata", [&] {
    torchtpu::Tensor t = rt.from_host(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
    check::eq(t.shape(), std::vector<int64_t>({2, 3}), "shape");
    check::eq(t.strides(), std::vector<int64_t>({3, 1}), "strides");
    check::ok(t.dtype() == torchtpu::DType::Float32, "dtype");
    check::eq(t.numel(), int64_t{6}, "numel");
    check::eq(t.device(), int64_t{0}, "device");
  });

  check::run("elementwise operators", [&] {
    torchtpu::Tensor a = rt.from_host(std::vector<float>{1, 2, 3}, {3});
    torchtpu::Tensor b = rt.from_host(std::vector<float>{10, 20, 30}, {3});
    check::near((a + b).to_host<float>(), {11, 22, 33}, 0, "a + b");
    check::near((b - a).to_host<float>(), {9, 18, 27}, 0, "b - a");
    check::near((a * b).to_host<float>(), {10, 40, 90}, 0, "a * b");
    check::near((b / a).to_host<float>(), {10, 10, 10}, 1e-6f, "b / a");
    check::near((a + 0.5).to_host<float>(), {1.5f, 2.5f, 3.5f}, 0, "a + 0.5");
    check::near((a - 1.0).to_host<float>(), {0, 1, 2}, 0, "a - 1");
    check::near((a * 2.0).to_host<float>(), {2, 4, 6}, 0, "a * 2");
    check::near((a / 4.0).to_host<float>(), {0.25f, 0.5f, 0.75f}, 0, "a / 4");
    check::near((3.0 * a).to_host<float>(), {3, 6, 9}, 0, "3 * a");
    check::near((-a).to_host<float>(), {-1, -2, -3}, 0, "-a");
  });

  check::run("matmul 2x3 @ 3x2", [&] {
    torchtpu::Tensor a = rt.from_host(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
    torchtpu::Tensor b = rt.from_host(std::vector<float>{7, 8, 9, 10, 11, 12}, {3, 2});
    torchtpu::Tensor c = torchtpu::matmul(a, b);
    check::eq(c.shape(), std::vector<int64_t>({2, 2}), "shape");
    // [1*7+2*9+3*11, 1*8+2*10+3*12; 4*7+5*9+6*11, 4*8+5*10+6*12]
    check::near(c.to_host<float>(), {58, 64, 139, 154}, 1e-5f, "values");
  });

  check::run("linear + relu", [&] {
    torchtpu::Tensor x = rt.from_host(std::vector<float>{1, -2, 3, 0.5f}, {2, 2});
    torchtpu::Tensor w = rt.from_host(std::vector<float>{1, 1, 2, -1, -1, 0}, {3, 2});
    torchtpu::Tensor b = rt.from_host(std::vector<float>{0.5f, -1, 0}, {3});
    // x @ w.T + b = [-0.5, 3, -1; 4, 4.5, -3]
    torchtpu::Tensor y = torchtpu::relu(torchtpu::linear(x, w, b));
    check::eq(y.shape(), std::vector<int64_t>({2, 3}), "shape");
    check::near(y.to_host<float>(), {0, 3, 0, 4, 4.5f, 0}, 1e-5f, "values");
    check::near(torchtpu::linear(x, w).to_host<float>(), {-1, 4, -1, 3.5f, 5.5f, -3}, 1e-5f, "no bias");
  });

  check::run("arange int64", [&] {
    torchtpu::Tensor r = torchtpu::call1(rt, "aten::arange", torchtpu::Scalar(5));
    check::ok(r.dtype() == torchtpu::DType::Int64, "dtype int64");
    check::eq(r.shape(), std::vector<int64_t>({5}), "shape");
    check::eq(r.to_host<int64_t>(), std::vector<int64_t>({0, 1, 2, 3, 4}), "values");
    torchtpu::Tensor s = torchtpu::call1(rt, "aten::arange.start_step", {torchtpu::Scalar(2), torchtpu::Scalar(11),
                                                                          torchtpu::Scalar(3)});
    check::eq(s.to_host<int64_t>(), std::vector<int64_t>({2, 5, 8}), "start_step");
  });

  check::run("argument kinds", [&] {
    torchtpu::Tensor a = rt.from_host(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
    torchtpu::Tensor b = rt.from_host(std::vector<float>{10, 20, 30}, {3});
    // INT_LIST
    torchtpu::Tensor r = torchtpu::call1(rt, "aten::reshape", a, std::vector<int64_t>{3, 2});
    check::eq(r.shape(), std::vector<int64_t>({3, 2}), "reshape via INT_LIST");
    // TENSOR_LIST + INT
    std::vector<torchtpu::Tensor> parts;
    parts.push_back(b.retain());
    parts.push_back(b.retain());
    torchtpu::Tensor cat = torchtpu::call1(rt, "aten::cat", parts, 0);
    check::near(cat.to_host<float>(), {10, 20, 30, 10, 20, 30}, 0, "cat via TENSOR_LIST");
    // STRING (rounding mode) and DOUBLE-less Scalar division
    torchtpu::Tensor q = torchtpu::call1(rt, "aten::div.Tensor_mode", b, a, std::string("floor"));
    check::eq(q.shape(), std::vector<int64_t>({2, 3}), "div floor broadcast shape");
    check::near(q.to_host<float>(), {10, 10, 10, 2, 4, 5}, 0, "div floor via STRING");
    // INT_LIST? dim, BOOL keepdim, DTYPE
    torchtpu::Tensor s =
        torchtpu::call1(rt, "aten::sum.dim_IntList", a, std::vector<int64_t>{1}, true, torchtpu::DType::Float64);
    check::ok(s.dtype() == torchtpu::DType::Float64, "sum dtype via DTYPE");
    check::eq(s.shape(), std::vector<int64_t>({2, 1}), "keepdim via BOOL");
    check::eq(s.to_host<double>(), std::vector<double>({6, 15}), "sum values");
    // NONE via std::nullopt and OPTIONAL_TENSOR
    torchtpu::Tensor c = torchtpu::call1(rt, "aten::clamp", a, std::nullopt, torchtpu::Scalar(4));
    check::near(c.to_host<float>(), {1, 2, 3, 4, 4, 4}, 0, "clamp(max=4) via NONE");
    std::optional<torchtpu::Tensor> lo(rt.from_host(std::vector<float>{2, 2, 2}, {3}));
    std::optional<torchtpu::Tensor> none;
    torchtpu::Tensor ct = torchtpu::call1(rt, "aten::clamp.Tensor", a, lo, none);
    check::near(ct.to_host<float>(), {2, 2, 3, 4, 5, 6}, 0, "clamp.Tensor via OPTIONAL_TENSOR");
    // multi-result, vector<Arg> built at run time
    std::vector<torchtpu::Arg> args;
    args.emplace_back(a);
    args.emplace_back(1);
    args.emplace_back(1);
    std::vector<torchtpu::Tensor> cols = torchtpu::call(rt, "aten::split.Tensor", args);
    check::eq(cols.size(), std::size_t{3}, "split returns 3 tensors");
    check::near(cols[2].to_host<float>(), {3, 6}, 0, "third column");
  });

  check::run("host dtypes round-trip", [&] {
    check::eq(rt.from_host(std::vector<double>{1.5, -2}, {2}).to_host<double>(), std::vector<double>({1.5, -2}), "f64");
    check::eq(rt.from_host(std::vector<int32_t>{-7, 9}, {2}).to_host<int32_t>(), std::vector<int32_t>({-7, 9}), "i32");
    check::eq(rt.from_host(std::vector<int16_t>{-3}, {1}).to_host<int16_t>(), std::vector<int16_t>({-3}), "i16");
    check::eq(rt.from_host(std::vector<int8_t>{-1, 1}, {2}).to_host<int8_t>(), std::vector<int8_t>({-1, 1}), "i8");
    check::eq(rt.from_host(std::vector<uint8_t>{255, 0}, {2}).to_host<uint8_t>(), std::vector<uint8_t>({255, 0}), "u8");
    torchtpu::Tensor bt = rt.from_host(std::vector<torchtpu::Bool>{true, false, true}, {3});
    check::ok(bt.dtype() == torchtpu::DType::Bool, "bool dtype");
    std::vector<torchtpu::Bool> back = bt.to_host<torchtpu::Bool>();
    check::ok(back.size() == 3 && back[0] && !back[1] && back[2], "bool values");
    torchtpu::Tensor scalar = rt.from_host(std::vector<float>{42}, {});
    check::eq(scalar.shape(), std::vector<int64_t>(), "0-d shape");
    check::near(scalar.to_host<float>(), {42}, 0, "0-d value");
  });

  check::run("complex tensors and a float list argument", [&] {
    using c64 = std::complex<float>;
    torchtpu::Tensor z = rt.from_host(std::vector<c64>{{1, 2}, {3, -1}}, {2});
    check::ok(z.dtype() == torchtpu::DType::Complex64, "complex64 dtype");
    // (1+2i)^2 = -3+4i, (3-i)^2 = 8-6i
    const std::vector<c64> sq = (z * z).to_host<c64>();
    check::ok(sq.size() == 2 && sq[0] == c64(-3, 4) && sq[1] == c64(8, -6), "z * z");
    // histogram(bins=2, range=[0, 2]) of {0, 0.5, 1, 2, 5}: {2, 2}
    torchtpu::Tensor x = rt.from_host(std::vector<float>{0, 0.5f, 1, 2, 5}, {5});
    std::vector<torchtpu::Arg> args;
    args.emplace_back(x);
    args.emplace_back(2);
    args.emplace_back(std::vector<double>{0.0, 2.0});
    std::vector<torchtpu::Tensor> h = torchtpu::call(rt, "aten::histogram.bin_ct", args);
    check::near(h[0].to_host<float>(), {2, 2}, 0, "histogram counts");
    check::near(h[1].to_host<float>(), {0, 1, 2}, 0, "histogram edges");
  });

  return check::finish();
}
