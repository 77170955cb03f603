#include "serving/support/sort_doubles.hpp"

#include <algorithm>
#include <cstdint>

#include "serving/support/radix_sort.hpp"

namespace kvlab {

void sort_doubles(std::vector<double>& v) {
  if (v.size() < radix::kRadixFrom) {
    std::sort(v.begin(), v.end());
    return;
  }
  std::vector<std::uint64_t> keys(v.size());
  std::transform(v.begin(), v.end(), keys.begin(), [](double x) { return radix::key_of<std::uint64_t>(x); });
  radix::radix_sort(keys);
  std::transform(keys.begin(), keys.end(), v.begin(), [](std::uint64_t k) { return radix::value_of<double>(k); });
}

}  // namespace kvlab
