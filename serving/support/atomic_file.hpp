#pragma once
// Every file kvlab writes goes through here: the whole content is written to NAME.tmp.<pid> in the
// same directory, flushed and checked, synced to the disk (fsync) and closed and checked, then
// renamed over NAME, and the directory synced too. A reader (or a later run, even after a crash of
// the machine) sees either the old file or the complete new one, never a truncated one; on any
// failure the temporary file is removed and the error names the file and the reason. A path that
// names a device or a pipe (/dev/stdout, /dev/full) is written in place, with the same checks;
// through a symbolic link the linked file is replaced.
//
// Fault injection for tests (a seam, set by whoever composes the process, never read here from the
// environment): after fail_writes_after(N), the writes of this process fail once N more bytes have
// gone through here, as if the disk had filled up (ENOSPC). The kvlab binary sets it from
// KVLAB_FAIL_WRITES_AFTER_BYTES=N at start (experiments/cli/kvlab_main.cpp), so tests can check what
// a full disk does to `kvlab replay --out DIR` without a small filesystem.
#include <cstdint>
#include <filesystem>
#include <string_view>

namespace kvlab {

/// Writes `content` to `file` atomically (see above); creates no directories. Throws kvlab::Error
/// "cannot write FILE: REASON" (REASON from strerror where the system gave one).
void write_file_atomically(const std::filesystem::path& file, std::string_view content);

/// Test seam: the writes through write_file_atomically fail with ENOSPC once `bytes` more have
/// been written; a negative value lifts the limit (the default).
void fail_writes_after(std::int64_t bytes) noexcept;

}  // namespace kvlab
