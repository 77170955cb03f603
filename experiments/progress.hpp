#pragma once
// A progress line on stderr that appears only once a run has taken longer than a second.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace kvlab {

class Progress {
 public:
  explicit Progress(std::string label, bool enabled = true)
      : label_(std::move(label)), enabled_(enabled), start_(std::chrono::steady_clock::now()) {}
  ~Progress() {
    if (shown_) std::fputc('\n', stderr);
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(std::int64_t done, std::int64_t total) {
    if (!enabled_ || total <= 0) return;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (elapsed < 1.0) return;
    shown_ = true;
    const int width = 30;
    const int filled = static_cast<int>(width * done / total);
    std::fprintf(stderr, "\r%s [%.*s%*s] %lld/%lld (%.1f s)", label_.c_str(), filled,
                 "##############################", width - filled, "", static_cast<long long>(done),
                 static_cast<long long>(total), elapsed);
    std::fflush(stderr);
  }

 private:
  std::string label_;
  bool enabled_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kvlab
