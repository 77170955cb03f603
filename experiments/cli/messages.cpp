#include "experiments/cli/messages.hpp"

#include <fmt/format.h>

#include <iostream>
#include <map>

namespace kvlab::cli {

namespace {
namespace po = boost::program_options;

/// Reads the protected parts of a Boost option error (pointers to members named through a derived
/// class are pointers to the base's members; no object of this type is ever made).
struct OptionErrorParts : po::error_with_option_name {
  static auto substitutions() { return &OptionErrorParts::m_substitutions; }
  static auto defaults() { return &OptionErrorParts::m_substitution_defaults; }
  static auto prefix() { return &OptionErrorParts::get_canonical_option_prefix; }
};

/// Boost's substitution, with each placeholder replaced once: defaults for missing values first
/// (as Boost does), then one left-to-right pass over %name% placeholders.
std::string substitute_once(const po::error_with_option_name& e) {
  std::map<std::string, std::string> values = e.*OptionErrorParts::substitutions();
  values["canonical_option"] = e.get_option_name();
  values["prefix"] = (e.*OptionErrorParts::prefix())();
  std::string text = e.m_error_template;
  for (const auto& [name, from_to] : e.*OptionErrorParts::defaults()) {
    if (const auto it = values.find(name); it != values.end() && !it->second.empty()) continue;
    const auto& [from, to] = from_to;
    if (from.empty()) continue;
    for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
      text.replace(at, from.size(), to);
  }
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t close = text[i] == '%' ? text.find('%', i + 1) : std::string::npos;
    const auto it = close == std::string::npos ? values.end() : values.find(text.substr(i + 1, close - i - 1));
    if (it == values.end()) {
      out += text[i++];
    } else {
      out += it->second;
      i = close + 1;
    }
  }
  return out;
}
}  // namespace

std::string one_line(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const auto u = static_cast<unsigned char>(text[i]);
    if (u >= 0x80) {  // a UTF-8 sequence kept whole when it is one, else its first byte escaped
      const std::size_t n = u >= 0xf0 && u <= 0xf4 ? 4 : u >= 0xe0 ? 3 : u >= 0xc2 && u <= 0xdf ? 2 : 0;
      bool valid = n > 0 && i + n <= text.size();
      for (std::size_t k = 1; valid && k < n; ++k) valid = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
      if (valid && n == 3) {  // no overlong forms, no surrogates
        const auto b = static_cast<unsigned char>(text[i + 1]);
        valid = !(u == 0xe0 && b < 0xa0) && !(u == 0xed && b >= 0xa0);
      } else if (valid && n == 4) {
        const auto b = static_cast<unsigned char>(text[i + 1]);
        valid = !(u == 0xf0 && b < 0x90) && !(u == 0xf4 && b >= 0x90);
      }
      if (valid) {
        out.append(text.substr(i, n));
        i += n;
      } else {
        out += fmt::format("\\x{:02x}", u);
        ++i;
      }
      continue;
    }
    const char c = text[i++];
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else if (u < 0x20 || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  return out;
}

void print_error(std::string_view command, std::string_view kind, std::string_view message) {
  std::cerr << "kvlab " << one_line(command) << ": " << kind << ": " << one_line(message) << "\n";
}

std::string user_message(const std::exception& e) {
  std::string m = e.what();
  if (m.rfind("kvlab error at ", 0) == 0)
    if (const auto colon = m.find(": "); colon != std::string::npos) m.erase(0, colon + 2);
  return m;
}

std::string option_error_message(const boost::program_options::error_with_option_name& e) { return substitute_once(e); }

}  // namespace kvlab::cli
