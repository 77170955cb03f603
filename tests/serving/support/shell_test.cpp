// Shell words: what kvlab records as a command must read back as the same words, on one line.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "serving/support/shell.hpp"

namespace kvlab {
namespace {

/// The words bash reads from `command_text` (printf '%s\0' over them), NUL-separated.
std::vector<std::string> words_bash_reads(const std::string& command_text) {
  const std::string script = "printf '%s\\0' " + command_text;
  FILE* p = popen(("bash -c " + shell_quote(script)).c_str(), "r");
  if (p == nullptr) return {};
  std::string out;
  char buf[256];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  pclose(p);
  std::vector<std::string> words;
  for (std::size_t start = 0, end; (end = out.find('\0', start)) != std::string::npos; start = end + 1)
    words.push_back(out.substr(start, end - start));
  return words;
}

TEST(Shell, RecordedCommandsStayOnOneLineAndReadBackExactly) {
  const std::vector<std::string> words = {"kvlab",     "replay",         "--out",           "dir with\nnewline",
                                          "tab\there", "esc\x1b[31mred", "quote'and\\back", "plain-word_1.csv",
                                          ""};
  const std::string line = shell_join_one_line(words);
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  EXPECT_EQ(line.find('\x1b'), std::string::npos) << line;
  EXPECT_EQ(words_bash_reads(line), words);
  EXPECT_NE(line.find("plain-word_1.csv"), std::string::npos);  // readable words stay bare
}

TEST(Shell, ExecutedCommandsQuoteAnyByte) {
  const std::vector<std::string> words = {"a b", "it's", "$HOME", "`x`", "new\nline", "*"};
  EXPECT_EQ(words_bash_reads(shell_join(words)), words);
}

// The plot script is found wherever kvlab runs: $KVLAB_PLOT_SCRIPT first (a name that is no file
// finds nothing rather than something else), else from the binary's own place (here the test
// binary in build/<preset>/tests/, three folders below the source tree's scripts/plot.py).
TEST(PlotScriptPath, EnvironmentFirstThenBesideTheBinaryOrItsSourceTree) {
  namespace fs = std::filesystem;
  const fs::path fake = fs::temp_directory_path() / "kvlab-plot-script-test.py";
  std::ofstream(fake) << "# not a real plot script\n";
  ::setenv("KVLAB_PLOT_SCRIPT", fake.c_str(), 1);
  EXPECT_EQ(plot_script_path(), fake.string());
  ::setenv("KVLAB_PLOT_SCRIPT", (fake.string() + ".missing").c_str(), 1);
  EXPECT_EQ(plot_script_path(), "");
  EXPECT_EQ(run_plot_script({"compare", "/nonexistent"}, true), PlotOutcome::no_script);
  ::unsetenv("KVLAB_PLOT_SCRIPT");
  const std::string found = plot_script_path();
  ASSERT_FALSE(found.empty());
  EXPECT_TRUE(fs::equivalent(found, fs::path(KVLAB_SOURCE_DIR) / "scripts" / "plot.py")) << found;
  fs::remove(fake);
}

}  // namespace
}  // namespace kvlab
