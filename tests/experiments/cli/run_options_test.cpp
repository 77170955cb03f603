// replay's and compare's command line apart from the commands: what parses, what is refused with
// one line, and Boost's option errors told without looping (experiments/cli/).
#include "experiments/cli/run_options.hpp"

#include <gtest/gtest.h>

#include <future>
#include <string>
#include <vector>

#include "experiments/cli/messages.hpp"

namespace kvlab::cli {
namespace {

TEST(ParseRunCommand, ReplayTakesOneBackendCompareAList) {
  const RunCommand replay = parse_run_command("replay", {"--backend", "vmm-2m", "--requests", "7", "--rate", "3"});
  ASSERT_FALSE(replay.help);
  EXPECT_EQ(replay.backends, (std::vector<std::string>{"vmm-2m"}));
  EXPECT_EQ(replay.options.requests, 7);
  EXPECT_DOUBLE_EQ(replay.options.rate, 3.0);
  EXPECT_TRUE(replay.options.rate_given);
  const RunCommand compare = parse_run_command("compare", {"--backends", "paged-16,,contiguous-max"});
  EXPECT_EQ(compare.backends, (std::vector<std::string>{"paged-16", "contiguous-max"}));
  EXPECT_FALSE(compare.options.rate_given);  // its default
}

TEST(ParseRunCommand, HelpIsTheOptionsTableAndChecksNothing) {
  const RunCommand r = parse_run_command("replay", {"--help", "--requests", "-5"});
  EXPECT_TRUE(r.help);
  EXPECT_NE(r.help_text.find("--capacity-gib"), std::string::npos);
  EXPECT_NE(r.help_text.find("--backend"), std::string::npos);
}

TEST(ParseRunCommand, RefusesOutOfBoundsValuesNamingTheOption) {
  const std::vector<std::vector<std::string>> bad = {
      {"--requests", "10000001"}, {"--max-seq-len", "16777217"}, {"--rate", "1e-7"},
      {"--capacity-gib", "0"},    {"--percentiles", "0"},        {"--backend", "paged-16", "--samples", "0"}};
  for (const auto& args : bad) {
    try {
      (void)parse_run_command("replay", args);
      ADD_FAILURE() << args.front() << " " << args[1] << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(args.size() == 2 ? args.front() : "--samples"), std::string::npos)
          << e.what();
    }
  }
}

TEST(ParseRunCommand, TensorParallelSplitsTheModelledDeviceAndRecordsItsSource) {
  const RunCommand four = parse_run_command(
      "replay", {"--model", "opt-66b", "--device-model", "a100-40gb", "--tensor-parallel", "4", "--requests", "3"});
  const ReplayConfig c = four.options.replay_config();
  EXPECT_EQ(c.device.tensor_parallel, 4);
  EXPECT_EQ(c.device.sources.at("tensor_parallel"), "--tensor-parallel");
  EXPECT_NE(four.options.clock_description(c.device).find("a100-40gb x4 (tensor parallel)"), std::string::npos);
  // Not given: the device model's own (one GPU in the presets), and the description says nothing more.
  const RunCommand one = parse_run_command("replay", {"--model", "opt-66b", "--device-model", "a100-40gb"});
  EXPECT_EQ(one.options.replay_config().device.tensor_parallel, 1);
  EXPECT_EQ(one.options.clock_description(one.options.replay_config().device), "modelled on a100-40gb");
  // Heads that do not split, or a device without an interconnect, are refused naming the option.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--model", "opt-66b", "--tensor-parallel", "5"},
        std::vector<std::string>{"--model", "opt-66b", "--tensor-parallel", "2", "--device-model", "host"}}) {
    try {
      (void)parse_run_command("replay", args);
      ADD_FAILURE() << args[3] << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--tensor-parallel " + args[3] + ":"), std::string::npos) << e.what();
    }
  }
}

TEST(ParseRunCommand, StrayPositionalArgumentsAreErrors) {
  EXPECT_THROW((void)parse_run_command("compare", {"paged-16"}), boost::program_options::error);
}

// Boost 1.74's what() replaces placeholders until none is left: an unknown option holding one
// looped forever (found by tests/fuzz/options_fuzz.cpp). The message is built here, in one pass.
TEST(OptionErrorMessage, AnArgumentHoldingAPlaceholderEndsAndIsQuotedAsTyped) {
  for (const std::string token : {"--x%original_token%", "--y%option%%canonical_option%", "--z%prefix%%value%"}) {
    auto message = std::async(std::launch::async, [&] {
      try {
        (void)parse_run_command("replay", {token});
      } catch (const boost::program_options::error_with_option_name& e) {
        return option_error_message(e);
      }
      return std::string("accepted");
    });
    ASSERT_EQ(message.wait_for(std::chrono::seconds(20)), std::future_status::ready) << token << " did not end";
    EXPECT_EQ(message.get(), "unrecognised option '" + token + "'");
  }
}

TEST(OptionErrorMessage, ReadsAsBoostsOwnForOrdinaryArguments) {
  try {
    (void)parse_run_command("replay", {"--requests", "many"});
    FAIL() << "accepted";
  } catch (const boost::program_options::error_with_option_name& e) {
    EXPECT_EQ(option_error_message(e), "the argument ('many') for option '--requests' is invalid");
  }
}

}  // namespace
}  // namespace kvlab::cli
