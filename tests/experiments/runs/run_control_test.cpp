// The output-directory lock, the completion marker and collect's merge (experiments/runs/run_control.hpp,
// experiments/runs/sweep.hpp). The binary-level behaviour (two processes, signals, a killed sweep) is in
// tests/cli/check_run_control.sh.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "alloc/core/error.hpp"
#include "experiments/runs/run_control.hpp"
#include "experiments/runs/sweep.hpp"

namespace kvlab {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("kvlab-run-control-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write(const fs::path& f, const std::string& text) {
  fs::create_directories(f.parent_path());
  std::ofstream(f) << text;
}

TEST(OutputLock, ASecondLockFailsNamingTheHolderAndTheFileGoesWithTheFirst) {
  const fs::path d = fresh_dir("lock");
  {
    const OutputLock first(d, "kvlab replay --out x");
    EXPECT_TRUE(fs::exists(d / kLockFile));
    ASSERT_TRUE(lock_holder(d).has_value());
    EXPECT_EQ(*lock_holder(d), "pid " + std::to_string(::getpid()) + ": kvlab replay --out x");
    try {
      const OutputLock second(d, "kvlab compare");
      FAIL() << "a second lock on the same directory succeeded";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(d.string() + " is in use by another kvlab run (pid " + std::to_string(::getpid()) +
                       ": kvlab replay --out x)"),
                std::string::npos)
          << m;
    }
  }
  EXPECT_FALSE(fs::exists(d / kLockFile));
  EXPECT_FALSE(lock_holder(d).has_value());
  const OutputLock again(d, "kvlab replay");  // free again
  fs::remove_all(d);
}

TEST(CompletionMarker, ValidOnlyWhileEveryNamedFileHasItsRecordedSize) {
  const fs::path d = fresh_dir("marker");
  EXPECT_NE(completion_problem(d).find("no completion marker"), std::string::npos);
  write(d / "compare.csv", "# kvlab\nbackend\npaged-b16\n");
  write(d / "paged-b16/summary.json", "{}\n");
  write_completion_marker(d, "kvlab replay", {"compare.csv", "paged-b16/summary.json"});
  EXPECT_TRUE(is_complete(d)) << completion_problem(d);
  write(d / "compare.csv", "");  // truncated after the fact
  EXPECT_NE(completion_problem(d).find("compare.csv has 0 bytes"), std::string::npos) << completion_problem(d);
  write(d / "compare.csv", "# kvlab\nbackend\npaged-b16\n");
  fs::remove(d / "paged-b16/summary.json");
  EXPECT_NE(completion_problem(d).find("paged-b16/summary.json is missing"), std::string::npos);
  write(d / kMarkerFile, "{\"complete\": tru");
  EXPECT_NE(completion_problem(d).find("not a valid completion marker"), std::string::npos);
  remove_completion_marker(d);
  EXPECT_FALSE(fs::exists(d / kMarkerFile));
  remove_completion_marker(d);  // nothing to remove: fine
  EXPECT_THROW(write_completion_marker(d, "kvlab replay", {"no-such-file"}), Error);
  fs::remove_all(d);
}

TEST(CollectSweep, MergesCompletePointsOfTheGridByColumnNameWithAColumnPerAxis) {
  const fs::path d = fresh_dir("collect");
  const std::vector<SweepPoint> points =
      expand_sweep({{"backend", {"paged-16", "vmm-64k"}, 1}, {"fixed", {"--requests 5"}, 2}});
  ASSERT_EQ(points.size(), 2u);
  write_sweep_grid(points, d);
  write(d / "point-0001/compare.csv", "# kvlab replay a\nbackend,cow_copies\npaged-b16,3\n");
  write(d / "point-0002/compare.csv", "# kvlab replay b\nbackend,critical_maps\nvmm-64k,7\n");
  write(d / "point-0003/compare.csv", "# kvlab replay old\nbackend\nstale\n");  // an older, larger grid
  for (const char* p : {"point-0001", "point-0002", "point-0003"})
    write_completion_marker(d / p, "kvlab replay", {"compare.csv"});
  const Collected c = collect_sweep(d);
  EXPECT_EQ(c.rows, 2);
  EXPECT_EQ(c.csv,
            "point,axis_backend,command,backend,cow_copies,critical_maps\n"
            "point-0001,paged-16,kvlab replay a,paged-b16,3,\n"
            "point-0002,vmm-64k,kvlab replay b,vmm-64k,,7\n");
  ASSERT_EQ(c.skipped.size(), 1u);
  EXPECT_NE(c.skipped[0].find("point-0003: not a point of the current grid"), std::string::npos);

  remove_completion_marker(d / "point-0002");
  const Collected partial = collect_sweep(d);
  EXPECT_EQ(partial.rows, 1);
  EXPECT_NE(partial.skipped.back().find("point-0002: no completion marker"), std::string::npos);

  EXPECT_THROW(check_collect_output(d, d / "point-0001" / "compare.csv"), InvalidArgument);
  EXPECT_NO_THROW(check_collect_output(d, d / "collected.csv"));
  fs::remove_all(d);
}

}  // namespace
}  // namespace kvlab
