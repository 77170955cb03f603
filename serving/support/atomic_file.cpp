#include "serving/support/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>

#include "alloc/core/error.hpp"

namespace kvlab {

namespace fs = std::filesystem;

namespace {

std::atomic<std::int64_t> g_budget{-1};  ///< bytes this process may still write (fail_writes_after); -1: no limit

/// Bytes this process may still write; -1 without a limit.
std::int64_t injected_budget() { return g_budget.load(); }

/// write(2) of all of `data`, honouring the injected budget; false with errno set on failure.
bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    std::size_t n = data.size();
    if (const std::int64_t budget = injected_budget(); budget >= 0) {
      if (budget == 0) {
        errno = ENOSPC;
        return false;
      }
      n = std::min<std::size_t>(n, static_cast<std::size_t>(budget));
    }
    const ssize_t w = ::write(fd, data.data(), n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (g_budget.load() >= 0) g_budget -= w;
    data.remove_prefix(static_cast<std::size_t>(w));
  }
  return true;
}

[[noreturn]] void fail(const fs::path& file, const std::string& reason) {
  KVLAB_THROW(Error, "cannot write " + file.string() + ": " + reason);
}

/// Writes, then (when `sync`) flushes to the disk, then closes `fd`; the errno of the first
/// failure, 0 on success.
int write_and_close(int fd, std::string_view content, bool sync) {
  int err = write_all(fd, content) ? 0 : errno;
  // Before the rename: a crash right after it must find the new bytes under the name, not an
  // empty file (ext4 and XFS may order the rename before the data otherwise).
  if (err == 0 && sync && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;  // some filesystems report a full disk only at close
  return err;
}

/// Makes a rename in `dir` durable (the directory entry itself); best effort: a directory that
/// cannot be opened or synced (some network filesystems) leaves the rename as the kernel has it.
void sync_directory(const fs::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

}  // namespace

void fail_writes_after(std::int64_t bytes) noexcept { g_budget = bytes < 0 ? -1 : bytes; }

void write_file_atomically(const fs::path& file, std::string_view content) {
  struct stat st {};
  if (::stat(file.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    // A device or pipe (/dev/stdout, /dev/full, a FIFO): written in place, never replaced.
    const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) fail(file, std::strerror(errno));
    if (const int err = write_and_close(fd, content, /*sync=*/false); err != 0) fail(file, std::strerror(err));
    return;
  }
  std::error_code ec;
  fs::path target = file;  // through a symbolic link, the file it names is replaced (the link stays)
  if (fs::is_symlink(fs::symlink_status(file, ec))) target = fs::weakly_canonical(file, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) fail(file, ec.message());
  ec.clear();
  fs::path tmp = target;
  tmp += ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(file, std::strerror(errno));
  const int err = write_and_close(fd, content, /*sync=*/true);
  if (err == 0) {
    fs::rename(tmp, target, ec);
    if (!ec) {
      sync_directory(target.parent_path());
      return;
    }
  }
  std::error_code ignored;
  fs::remove(tmp, ignored);
  fail(file, err != 0 ? std::strerror(err) : ec.message());
}

}  // namespace kvlab
