#pragma once
// A progress line on stderr once a run has taken longer than a second: on a terminal one live line
// rewritten in place (\r), elsewhere (a redirected log) a plain line every 10 s, so logs hold no
// carriage returns; both with the estimated time left.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace kvlab {

class Progress {
 public:
  explicit Progress(std::string label, bool enabled = true)
      : Progress(std::move(label), enabled, isatty(fileno(stderr)) != 0) {}
  /// `live`: rewrite one line in place (a terminal); false: plain periodic lines.
  Progress(std::string label, bool enabled, bool live)
      : label_(std::move(label)), enabled_(enabled), live_(live), start_(std::chrono::steady_clock::now()) {}
  ~Progress() {
    if (shown_ && live_) std::fputc('\n', stderr);
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// One line of its own on stderr (a failed sweep point), not into the middle of a live line.
  void note(const std::string& line) {
    if (shown_ && live_) std::fputc('\n', stderr);
    shown_ = false;
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  }

  void update(std::int64_t done, std::int64_t total) {
    if (!enabled_ || total <= 0) return;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (elapsed < 1.0) return;
    if (!live_ && elapsed < next_plain_s_) return;
    next_plain_s_ = elapsed + kPlainEvery_s;
    shown_ = true;
    const std::string eta =
        done > 0 && done < total
            ? ", about " + seconds(elapsed * static_cast<double>(total - done) / static_cast<double>(done)) + " left"
            : "";
    if (live_) {
      const int width = 30;
      const int filled = static_cast<int>(width * done / total);
      std::fprintf(stderr, "\r%s [%.*s%*s] %lld/%lld (%.1f s%s)   ", label_.c_str(), filled,
                   "##############################", width - filled, "", static_cast<long long>(done),
                   static_cast<long long>(total), elapsed, eta.c_str());
    } else {
      std::fprintf(stderr, "%s: %lld/%lld after %.1f s%s\n", label_.c_str(), static_cast<long long>(done),
                   static_cast<long long>(total), elapsed, eta.c_str());
    }
    std::fflush(stderr);
  }

 private:
  static constexpr double kPlainEvery_s = 10;
  static std::string seconds(double s) {
    char buf[32];
    if (s < 120)
      std::snprintf(buf, sizeof buf, "%.0f s", s);
    else
      std::snprintf(buf, sizeof buf, "%.0f min", s / 60);
    return buf;
  }
  std::string label_;
  bool enabled_;
  bool live_;
  bool shown_ = false;
  double next_plain_s_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kvlab
