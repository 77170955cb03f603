// write_file_atomically: a complete file or the old one, never a truncated one nor a stray temp file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "alloc/core/error.hpp"
#include "serving/support/atomic_file.hpp"

namespace kvlab {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// A fresh directory under the system's temp directory, removed at the end of the test.
struct TempDir {
  fs::path path = fs::temp_directory_path() / ("kvlab-atomic-" + std::to_string(::getpid()));
  TempDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  [[nodiscard]] int entries() const {
    int n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(path)) ++n;
    return n;
  }
};

/// A full disk (the fail_writes_after seam) for one scope.
struct InjectedDiskFull {
  explicit InjectedDiskFull(const char* bytes) { fail_writes_after(std::atoll(bytes)); }
  ~InjectedDiskFull() { fail_writes_after(-1); }
};

TEST(AtomicFile, WritesAndReplacesTheWholeContent) {
  TempDir d;
  const fs::path f = d.path / "summary.json";
  write_file_atomically(f, "first version, longer than the second\n");
  EXPECT_EQ(read(f), "first version, longer than the second\n");
  write_file_atomically(f, "second\n");
  EXPECT_EQ(read(f), "second\n");
  write_file_atomically(f, "");
  EXPECT_EQ(read(f), "");
  EXPECT_EQ(d.entries(), 1);  // no temporary file left behind
}

TEST(AtomicFile, AFailedWriteKeepsTheOldFileAndLeavesNoTemporary) {
  TempDir d;
  const fs::path f = d.path / "steps.csv";
  write_file_atomically(f, "old, complete\n");
  {
    InjectedDiskFull full("0");
    try {
      write_file_atomically(f, std::string(100000, 'x'));
      FAIL() << "the injected full disk did not fail the write";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("cannot write " + f.string() + ": No space left on device"), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << "one line";
    }
  }
  EXPECT_EQ(read(f), "old, complete\n");
  EXPECT_EQ(d.entries(), 1);
}

TEST(AtomicFile, AFailedFirstWriteCreatesNothing) {
  TempDir d;
  {
    InjectedDiskFull full("0");
    EXPECT_THROW(write_file_atomically(d.path / "requests.csv", "id\n1\n"), Error);
  }
  EXPECT_EQ(d.entries(), 0);
}

TEST(AtomicFile, AMissingDirectoryIsNamed) {
  TempDir d;
  try {
    write_file_atomically(d.path / "no-such-dir" / "x.csv", "x\n");
    FAIL() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-dir/x.csv: No such file or directory"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(d.entries(), 0);
}

TEST(AtomicFile, ADeviceIsWrittenInPlaceAndItsErrorsReported) {
  EXPECT_NO_THROW(write_file_atomically("/dev/null", "discarded\n"));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  if (fs::is_character_file("/dev/full")) {
    EXPECT_THROW(write_file_atomically("/dev/full", "lost\n"), Error);
    EXPECT_TRUE(fs::is_character_file("/dev/full")) << "the device was replaced by a file";
  }
}

TEST(AtomicFile, ThroughASymbolicLinkTheLinkedFileIsReplaced) {
  TempDir d;
  write_file_atomically(d.path / "real.csv", "old\n");
  fs::create_symlink("real.csv", d.path / "link.csv");
  write_file_atomically(d.path / "link.csv", "new\n");
  EXPECT_TRUE(fs::is_symlink(d.path / "link.csv"));
  EXPECT_EQ(read(d.path / "real.csv"), "new\n");
  EXPECT_EQ(d.entries(), 2);
}

}  // namespace
}  // namespace kvlab
