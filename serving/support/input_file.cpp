#include "serving/support/input_file.hpp"

#include <fmt/format.h>

#include "alloc/core/error.hpp"

namespace kvlab {

void check_small_input_file(const std::filesystem::path& file, const std::string& what, std::uintmax_t max_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(file, ec);
  if (ec || !fs::exists(st)) return;
  if (fs::is_directory(st)) KVLAB_THROW(InvalidArgument, file.string() + ": is a directory, not " + what);
  if (!fs::is_regular_file(st))
    KVLAB_THROW(InvalidArgument, file.string() + ": is not a regular file (a device, pipe or socket), not " + what);
  const std::uintmax_t bytes = fs::file_size(file, ec);
  if (!ec && bytes > max_bytes)
    KVLAB_THROW(InvalidArgument, fmt::format("{}: is {} bytes, more than {} can be (at most {})", file.string(), bytes,
                                             what, max_bytes));
}

}  // namespace kvlab
