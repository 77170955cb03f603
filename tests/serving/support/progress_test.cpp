// The progress line (serving/support/progress.hpp): live (\r) only on a terminal, plain periodic lines
// with the time left otherwise, nothing during a run's first second.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "serving/support/progress.hpp"

namespace kvlab {
namespace {

TEST(Progress, PlainLinesForALogLiveLineForATerminal) {
  testing::internal::CaptureStderr();
  {
    Progress plain("replay x", true, /*live=*/false);
    plain.update(1, 10);  // within the first second: nothing
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    plain.update(5, 10);
    plain.update(6, 10);  // within 10 s of the last line: nothing
  }
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(log.find('\r'), std::string::npos) << log;
  EXPECT_EQ(log.rfind("replay x: 5/10 after 1.", 0), 0u) << log;
  EXPECT_NE(log.find(" s left\n"), std::string::npos) << log;
  EXPECT_EQ(log.find("6/10"), std::string::npos) << log;

  testing::internal::CaptureStderr();
  {
    Progress live("replay y", true, /*live=*/true);
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    live.update(3, 4);
  }
  const std::string term = testing::internal::GetCapturedStderr();
  EXPECT_EQ(term.rfind("\rreplay y [", 0), 0u) << term;
  EXPECT_NE(term.find("3/4"), std::string::npos) << term;
  EXPECT_EQ(term.back(), '\n');  // the line is ended when the run is

  testing::internal::CaptureStderr();
  {
    Progress off("z", false, true);
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    off.update(1, 2);
  }
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace kvlab
