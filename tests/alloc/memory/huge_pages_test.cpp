#include "alloc/memory/huge_pages.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "alloc/core/error.hpp"

namespace kvlab {
namespace {

// The VmFlags of the mapping of /proc/self/smaps that holds `p` ("" if none does): "hg" among them
// means the range was advised MADV_HUGEPAGE, whether or not the kernel had a huge page to give.
std::string vm_flags_at(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream range(line);
    if (line.find(':') > line.find(' ') && (range >> std::hex >> lo >> dash >> hi) && dash == '-') {
      inside = lo <= a && a < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

bool has_flag(const std::string& flags, const std::string& flag) {
  std::istringstream words(flags);
  for (std::string w; words >> w;)
    if (w == flag) return true;
  return false;
}

bool thp_takes_advice() {
  const std::string mode = transparent_huge_page_mode();
  return mode == "madvise" || mode == "always";
}

TEST(HugePageHostMemoryResource, LargeBlocksAre2MiBAlignedAdvisedAndWritable) {
  auto& mr = huge_page_host_memory_resource();
  for (const std::size_t bytes : {kHugePageBytes, 3 * kHugePageBytes + 12345}) {
    auto* p = static_cast<unsigned char*>(mr.allocate(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % kHugePageBytes, 0u) << bytes;
    std::memset(p, 0x5a, bytes);
    EXPECT_EQ(p[bytes - 1], 0x5a);
    if (thp_takes_advice()) {
      // The whole block, its last bytes too, lies in advised memory.
      EXPECT_TRUE(has_flag(vm_flags_at(p), "hg")) << vm_flags_at(p);
      EXPECT_TRUE(has_flag(vm_flags_at(p + bytes - 1), "hg")) << vm_flags_at(p + bytes - 1);
    }
    mr.deallocate(p, bytes);
  }
  EXPECT_EQ(mr.device(), Device::host);
  EXPECT_EQ(mr.name(), "host (huge pages)");
}

TEST(HugePageHostMemoryResource, ImpossibleSizeIsOutOfMemory) {
  EXPECT_THROW((void)huge_page_host_memory_resource().allocate(std::size_t{1} << 62), OutOfMemory);
}

TEST(HugePageAllocator, VectorsOfAHugePageAndMoreAreAdvised) {
  std::vector<float, HugePageAllocator<float>> big(kHugePageBytes / sizeof(float) * 2, 1.f);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(big.data()) % kHugePageBytes, 0u);
  EXPECT_EQ(big.back(), 1.f);
  if (thp_takes_advice()) {
    EXPECT_TRUE(has_flag(vm_flags_at(big.data()), "hg")) << vm_flags_at(big.data());
  }
  std::vector<float, HugePageAllocator<float>> small(100, 2.f);
  EXPECT_EQ(small[99], 2.f);
}

TEST(TransparentHugePages, ModeIsTheBracketedWordOrUnknown) {
  for (const std::string setting : {"enabled", "shmem_enabled"}) {
    const std::string mode = transparent_huge_page_mode(setting);
    EXPECT_FALSE(mode.empty());
    EXPECT_EQ(mode.find_first_of("[] \n"), std::string::npos) << mode;
  }
  EXPECT_EQ(transparent_huge_page_mode("no_such_setting"), "unknown");
  const std::string line = describe_host_huge_pages();
  EXPECT_NE(line.find("transparent huge pages: " + transparent_huge_page_mode()), std::string::npos) << line;
  EXPECT_NE(line.find(thp_takes_advice() ? "on 2 MiB pages" : "on 4 KiB pages"), std::string::npos) << line;
}

}  // namespace
}  // namespace kvlab
