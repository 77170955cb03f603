// How the command line reports what went wrong: one line per failure, naming the input.
#pragma once

#include <boost/program_options/errors.hpp>

#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kvlab::cli {

/// An error in what the user typed: reported as one line, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// `text` with every control character written as an escape (\n, \t, \xHH): an error quoting
/// what the user typed or a trace held stays one line and puts no raw escape sequence on a terminal.
/// Bytes that are not UTF-8 (a trace's raw bytes) are escaped the same way, so the line is text.
[[nodiscard]] std::string one_line(std::string_view text);

/// The one line a failed command prints: "kvlab COMMAND: error: ..." (what the user typed or
/// gave) or "kvlab COMMAND: failed: ..." (anything else, with its source location).
void print_error(std::string_view command, std::string_view kind, std::string_view message);

/// A kvlab error as the user should read it: without the "kvlab error at SOURCE:LINE: " prefix,
/// which locates kvlab's code, not the user's input (the message itself names the input).
[[nodiscard]] std::string user_message(const std::exception& e);

/// A Boost.Program_options error's message, built here rather than by its what(): Boost 1.74's
/// what() replaces placeholders until none is left, so an argument that holds one (`kvlab replay
/// --x%original_token%`, found by tests/fuzz/options_fuzz.cpp) made it loop forever. Here each
/// placeholder of the template is replaced once, in one pass. (Boost's other errors hold no
/// placeholders: their what() is safe.)
[[nodiscard]] std::string option_error_message(const boost::program_options::error_with_option_name& e);

}  // namespace kvlab::cli
