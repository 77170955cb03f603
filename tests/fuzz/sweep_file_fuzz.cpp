// libFuzzer target: feeds the input bytes to kvlab::parse_sweep and expands what parses. A bad
// sweep file must throw kvlab::InvalidArgument naming fuzz.sweep:LINE (or the grid); anything else
// escaping, a crash, a hang, a leak or an allocation past the fuzzer's limit is a finding (a grid
// of ten axes of ten values once expanded to ten billion points). What parses must satisfy:
// every axis has a key and values, the grid has the product of the axes' sizes in points (at most
// kMaxSweepPoints), point names are point-0001.. in order, and every point carries one value of
// each swept axis.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>

#include "alloc/core/error.hpp"
#include "experiments/runs/sweep.hpp"

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "sweep_file_fuzz: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

void check(const std::vector<kvlab::SweepAxis>& axes, const std::vector<kvlab::SweepPoint>& points) {
  std::size_t product = 1, swept = 0;
  for (const kvlab::SweepAxis& a : axes) {
    if (a.key.empty() || a.values.empty()) fail("an axis without key or values parsed");
    product *= a.values.size();
    swept += a.key != "fixed";
  }
  if (points.size() != product || points.size() > kvlab::kMaxSweepPoints) fail("the grid is not the axes' product");
  std::set<std::string> names;
  for (std::size_t i = 0; i < points.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "point-%04zu", i + 1);
    if (points[i].name != name) fail("point names out of order");
    if (points[i].params.size() != swept) fail("a point lacks an axis' value");
    names.insert(points[i].name);
  }
  if (names.size() != points.size()) fail("two points share a name");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    const auto axes = kvlab::parse_sweep(in, "fuzz.sweep");
    check(axes, kvlab::expand_sweep(axes));
  } catch (const kvlab::InvalidArgument& e) {
    const std::string what = e.what();
    if (what.find("fuzz.sweep") == std::string::npos && what.find("sweep's grid") == std::string::npos &&
        what.find("sweep axis") == std::string::npos)
      fail("an error that names neither the file nor the grid: " + what);
  }
  return 0;
}
