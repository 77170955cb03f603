#pragma once
// Small input files kvlab reads whole (device model files, sweep files): only regular files, and
// only up to a size no such file reaches. A device (/dev/zero), a FIFO or a socket given as one
// would otherwise grow a string until memory ran out, or block forever; trace files have their
// own check (serving/traces/trace_reader.cpp), since they are read line by line.
#include <cstdint>
#include <filesystem>
#include <string>

namespace kvlab {

/// Throws InvalidArgument, naming `file` and `what` it should be ("a device model file"), when it
/// is not a regular file or is larger than `max_bytes`. A missing file passes: the reader says so.
void check_small_input_file(const std::filesystem::path& file, const std::string& what, std::uintmax_t max_bytes);

}  // namespace kvlab
