// A tiny assertion helper for the C++ tests (no GoogleTest): each check
// prints a line on failure and counts it; `finish()` is main's exit code.
#pragma once

#include <torchtpu/torchtpu.hpp>

#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace check {

inline int& failures() {
  static int n = 0;
  return n;
}

inline void ok(bool cond, const std::string& what) {
  if (!cond) {
    ++failures();
    std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  }
}

template <class T>
void eq(const T& got, const T& want, const std::string& what) {
  ok(got == want, what);
}

inline void near(const std::vector<float>& got, const std::vector<float>& want, float tol, const std::string& what) {
  if (got.size() != want.size()) {
    ok(false, what + ": size " + std::to_string(got.size()) + " != " + std::to_string(want.size()));
    return;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      ok(false, what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", want " +
                    std::to_string(want[i]));
      return;
    }
  }
}

/// Runs `f`, which must throw torchtpu::Error with `code`.
template <class F>
void throws(ttpu_code code, F&& f, const std::string& what) {
  try {
    f();
    ok(false, what + ": no exception");
  } catch (const torchtpu::Error& e) {
    ok(e.code() == code, what + ": code " + std::to_string(static_cast<int>(e.code())) + " (" + e.what() +
                             "), want " + std::to_string(static_cast<int>(code)));
  } catch (const std::exception& e) {
    ok(false, what + ": wrong exception type: " + e.what());
  }
}

/// Runs a test body; an unexpected exception is a failure.
template <class F>
void run(const char* name, F&& f) {
  const int before = failures();
  try {
    f();
  } catch (const std::exception& e) {
    ok(false, std::string(name) + ": unexpected exception: " + e.what());
  }
  std::printf("%s %s\n", failures() == before ? "ok  " : "FAIL", name);
}

inline int finish() {
  if (failures() != 0) std::fprintf(stderr, "%d check(s) failed\n", failures());
  return failures() == 0 ? 0 : 1;
}

}  // namespace check
