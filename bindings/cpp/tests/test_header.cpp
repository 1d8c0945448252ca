// The header compiles on its own (with -Wall -Wextra -Werror -pedantic set
// by CMake), can be included twice, and matches the library's ABI version.
#include <torchtpu/torchtpu.hpp>
#include <torchtpu/torchtpu.hpp>

#include "check.hpp"

int main() {
  check::run("api version", [] {
    check::eq(torchtpu::api_version(), torchtpu::header_api_version, "library ABI version == header ABI version");
    check::ok(!torchtpu::version().empty(), "version string");
  });
  check::run("element sizes", [] {
    check::eq(torchtpu::element_size(torchtpu::DType::BFloat16), std::size_t{2}, "bf16");
    check::eq(torchtpu::element_size(torchtpu::DType::Int64), std::size_t{8}, "i64");
  });
  return check::finish();
}
