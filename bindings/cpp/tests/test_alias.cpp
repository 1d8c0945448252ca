// The shared in-place, out= and alias cases (tests/shared/alias_cases.txt,
// whose header explains the format) through the C++ wrapper, in strict and
// in fused mode.
#include "check.hpp"

#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::vector<int64_t> ints(const std::string& text) {
  std::vector<int64_t> out;
  if (text == "-") return out;
  std::stringstream ss(text);
  for (std::string p; std::getline(ss, p, ',');) out.push_back(std::stoll(p));
  return out;
}

torchtpu::DType dtype_of(const std::string& d) {
  if (d == "f32") return torchtpu::DType::Float32;
  if (d == "f64") return torchtpu::DType::Float64;
  if (d == "i64") return torchtpu::DType::Int64;
  throw std::runtime_error("unknown dtype " + d);
}

struct Spec {
  torchtpu::DType dtype;
  std::vector<int64_t> sizes;
  std::vector<double> values;
};

// `DTYPE SIZES = V...` from tok[first..].
Spec spec(const std::vector<std::string>& tok, std::size_t first) {
  if (tok.size() < first + 3 || tok[first + 2] != "=") throw std::runtime_error("expected DTYPE SIZES = VALUES");
  Spec s{dtype_of(tok[first]), ints(tok[first + 1]), {}};
  for (std::size_t i = first + 3; i < tok.size(); ++i) s.values.push_back(std::stod(tok[i]));
  return s;
}

template <class T, class U>
std::vector<T> cast(const std::vector<U>& v) {
  return std::vector<T>(v.begin(), v.end());
}

torchtpu::Tensor make(const torchtpu::Runtime& rt, const Spec& s) {
  switch (s.dtype) {
    case torchtpu::DType::Float32: return rt.from_host(cast<float>(s.values), s.sizes);
    case torchtpu::DType::Float64: return rt.from_host(s.values, s.sizes);
    default: return rt.from_host(cast<int64_t>(s.values), s.sizes);
  }
}

std::vector<double> values(const torchtpu::Tensor& t) {
  switch (t.dtype()) {
    case torchtpu::DType::Float32: return cast<double>(t.to_host<float>());
    case torchtpu::DType::Float64: return t.to_host<double>();
    default: return cast<double>(t.to_host<int64_t>());
  }
}

// Runs every case of `path`; returns how many.
int run_file(const std::string& path, const torchtpu::Runtime& rt, const std::string& mode) {
  std::ifstream in(path);
  check::ok(in.good(), "open " + path);
  std::map<std::string, torchtpu::Tensor> vars;
  std::optional<std::string> error;  // the last call's error message
  std::string line, name;
  int lineno = 0, cases = 0;
  auto where = [&] { return path + ":" + std::to_string(lineno) + ": " + name + " (" + mode + ")"; };
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> tok;
    std::stringstream ss(line);
    for (std::string t; ss >> t;) tok.push_back(t);
    const std::string& d = tok[0];
    const std::string rest = line.size() > d.size() ? line.substr(d.size() + 1) : "";
    if (error && d != "error") check::ok(false, where() + ": call failed: " + *error);
    if (d == "case") {
      name = tok.at(1);
    } else if (d == "tensor") {
      vars.insert_or_assign(tok.at(1), make(rt, spec(tok, 2)));
    } else if (d == "view") {
      vars.insert_or_assign(tok.at(1), vars.at(tok.at(2)).view(ints(tok.at(3)), ints(tok.at(4)), std::stoll(tok.at(5))));
    } else if (d == "declare") {
      check::ok(torchtpu::op_declare(rest), where() + ": declaration not supported: " + rest);
    } else if (d == "call") {
      std::size_t op = 1;
      std::optional<std::string> result;
      if (tok.size() > 3 && tok[2] == "=") {
        result = tok[1];
        op = 3;
      }
      std::vector<torchtpu::Arg> args;
      for (std::size_t i = op + 1; i < tok.size(); ++i) {
        const std::string& a = tok[i];
        if (a.rfind("i:", 0) == 0) args.emplace_back(std::stoll(a.substr(2)));
        else if (a.rfind("f:", 0) == 0) args.emplace_back(std::stod(a.substr(2)));
        else if (a.rfind("b:", 0) == 0) args.emplace_back(a.substr(2) != "0");
        else if (a.rfind("ints:", 0) == 0) args.emplace_back(ints(a.substr(5)));
        else if (a == "none") args.emplace_back(std::nullopt);
        else args.emplace_back(vars.at(a));
      }
      try {
        std::vector<torchtpu::Tensor> out = torchtpu::call(rt, tok[op].c_str(), args);
        if (result) vars.insert_or_assign(*result, std::move(out.at(0)));
      } catch (const torchtpu::Error& e) {
        error = e.what();
      }
    } else if (d == "same") {
      check::ok(vars.at(tok.at(1)).same_storage(vars.at(tok.at(2))), where() + ": " + tok[1] + " is not " + tok[2]);
    } else if (d == "want") {
      const torchtpu::Tensor& t = vars.at(tok.at(1));
      const Spec s = spec(tok, 2);
      check::ok(t.dtype() == s.dtype, where() + ": dtype of " + tok[1]);
      check::eq(t.shape(), s.sizes, where() + ": sizes of " + tok[1]);
      check::ok(values(t) == s.values, where() + ": values of " + tok[1]);
    } else if (d == "error") {
      check::ok(error && error->find(rest) != std::string::npos,
                where() + ": want an error with \"" + rest + "\", got " + error.value_or("success"));
      error.reset();
    } else if (d == "end") {
      vars.clear();
      ++cases;
    } else {
      check::ok(false, where() + ": unknown directive " + d);
    }
  }
  return cases;
}

}  // namespace

int main() {
  torchtpu::Runtime rt;
  const std::string path = std::string(TORCHTPU_ROOT) + "/tests/shared/alias_cases.txt";
  int strict = 0, fused = 0;
  check::run("alias cases, strict", [&] { strict = run_file(path, rt, "strict"); });
  check::run("alias cases, fused", [&] {
    torchtpu::set_mode(torchtpu::Mode::DeferAndFuse);
    fused = run_file(path, rt, "fused");
    torchtpu::set_mode(torchtpu::Mode::DeferNever);
  });
  check::ok(strict > 10 && strict == fused, "every case ran in both modes");
  return check::finish();
}
