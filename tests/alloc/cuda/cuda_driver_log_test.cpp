// KVLAB_DRIVER_LOG: one line per driver call with its arguments, what it wrote back and its
// CUresult, forwarded unchanged to the table underneath (here the double).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include "alloc/core/error.hpp"

#if KVLAB_HAS_CUDA_HEADERS
#include "alloc/cuda/cuda_driver_log.hpp"
#include "alloc/cuda/cuda_vmm_memory_resource.hpp"
#include "alloc/cuda/emulated/cuda_driver_double.hpp"

namespace kvlab {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string temp_log_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string(name) + "-" + std::to_string(::getpid()) + ".log"))
      .string();
}

::testing::AssertionResult HasLine(const std::string& text, const std::string& part) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "no line contains \"" << part << "\" in:\n" << text;
}

TEST(CudaDriverLog, WritesEveryCallWithArgumentsOutputsAndResult) {
  const std::string path = temp_log_path("kvlab-driver-log");
  std::filesystem::remove(path);
  CudaDriverDoubleConfig c;
  c.granularity = std::size_t{64} << 10;
  CudaDriverDouble dbl(c);
  {
    CudaDriverLog log(dbl.api(), path);
    {
      CudaVmmMemoryResource mr(log.api(), Device::emulated);
      void* p = mr.allocate(100);
      mr.deallocate(p, 100);
      dbl.fail_nth_call(CuEntry::cuMemMap, 1, CUDA_ERROR_INVALID_VALUE);
      EXPECT_THROW((void)mr.allocate(100), CudaError);  // the logged table forwards the result unchanged
      log.note("before the name");
      char name[64] = {};
      EXPECT_EQ(log.api().cuDeviceGetName(name, sizeof name, 0), CUDA_SUCCESS);
      EXPECT_STREQ(name, c.device_name.c_str());
    }
    EXPECT_EQ(dbl.call_count(CuEntry::cuMemCreate), 2u);
  }
  const std::string text = read_all(path);
  EXPECT_TRUE(HasLine(text, "# kvlab CUDA driver log, pid "));
  EXPECT_TRUE(HasLine(text, "cuCtxSynchronize@2000"));
  EXPECT_TRUE(HasLine(text, " cuInit(0) = CUDA_SUCCESS (0)"));
  EXPECT_TRUE(HasLine(text, "cuDevicePrimaryCtxRetain(0x"));
  EXPECT_TRUE(HasLine(text, ", 65536, 0x")) << "cuMemCreate's size";  // cuMemCreate(&handle->H, 65536, &prop{...}, 0)
  EXPECT_TRUE(HasLine(text, "{type=1, location=1:0}, 0) = CUDA_SUCCESS (0)"));
  EXPECT_TRUE(HasLine(text, "cuCtxSynchronize() = CUDA_SUCCESS (0)"));
  EXPECT_TRUE(HasLine(text, "cuMemMap(0x"));
  EXPECT_TRUE(HasLine(text, ") = CUDA_ERROR_INVALID_VALUE (1)"));
  EXPECT_TRUE(HasLine(text, "# before the name"));
  EXPECT_TRUE(HasLine(text, "->\"" + c.device_name + "\""));
  EXPECT_TRUE(HasLine(text, "cuMemAddressFree(0x"));
  // Each call line: seconds, thread, call.
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  ASSERT_TRUE(std::getline(in, line));
  double seconds = -1;
  int thread = -1;
  char call[64] = {};
  EXPECT_EQ(std::sscanf(line.c_str(), "%lf %d %63[a-zA-Z]", &seconds, &thread, call), 3) << line;
  EXPECT_GE(seconds, 0.0);
  EXPECT_EQ(thread, 0);
  std::filesystem::remove(path);
}

TEST(CudaDriverLog, OneAtATimeAndAnUnwritablePathIsNamed) {
  CudaDriverDouble dbl;
  const std::string path = temp_log_path("kvlab-driver-log-2");
  {
    CudaDriverLog log(dbl.api(), path);
    EXPECT_THROW(CudaDriverLog(dbl.api(), path + ".second"), InvalidArgument);
  }
  try {
    CudaDriverLog bad(dbl.api(), "/nonexistent-dir/kvlab.log");
    ADD_FAILURE() << "an unwritable path must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KVLAB_DRIVER_LOG: cannot open /nonexistent-dir/kvlab.log"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".second");
}

// Last in this file: the log it opens lives until the process exits (ctest runs each test alone).
TEST(CudaDriverLog, TheEnvironmentVariableLogsTheTableFirstAskedFor) {
  CudaDriverDouble dbl;
  ::unsetenv("KVLAB_DRIVER_LOG");
  EXPECT_EQ(&logged_if_requested(dbl.api()), &dbl.api());  // off: the table itself
  const std::string path = temp_log_path("kvlab-driver-log-env");
  std::filesystem::remove(path);
  ::setenv("KVLAB_DRIVER_LOG", path.c_str(), 1);
  const CudaDriverApi& logged = logged_if_requested(dbl.api());
  EXPECT_NE(&logged, &dbl.api());
  EXPECT_EQ(&logged_if_requested(dbl.api()), &logged) << "one log per process";
  const CudaDriverApi other;
  EXPECT_EQ(&logged_if_requested(other), &other) << "a second table is not logged";
  EXPECT_EQ(logged.cuInit(0), CUDA_SUCCESS);
  ::unsetenv("KVLAB_DRIVER_LOG");
  EXPECT_TRUE(HasLine(read_all(path), " cuInit(0) = CUDA_SUCCESS (0)"));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace kvlab

#else
TEST(CudaDriverLog, NeedsToolkitHeaders) { GTEST_SKIP() << "built without the CUDA toolkit headers"; }
#endif
