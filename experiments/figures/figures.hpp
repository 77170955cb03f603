#pragma once
// `kvlab figure NAME`: each headline figure of the papers kvlab is built to check, reproduced by one
// command into results/NAME/ — the data (data.csv), the plot (NAME.png, drawn by scripts/plot.py)
// and a README stating the command, the machine, whether times are measured or modelled, and our
// numbers next to the paper's. Smoke scale by default (seconds, run by CI), paper scale with --full.
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "serving/support/provenance.hpp"

namespace kvlab {

class DeviceContext;

struct FigureContext {
  bool full = false;                ///< paper scale
  std::filesystem::path out;        ///< results/NAME
  std::filesystem::path trace_dir;  ///< where the public traces are
  std::string command;              ///< the command that reproduces this figure
  bool progress = true;
  std::string formats = "png";  ///< the plot's files: png, pdf and/or svg, comma-separated (--format)
  /// Where the measured figures (Figure::on_device) put backends and run kernels: nullptr is the
  /// host; else the GPU or the emulated one (`kvlab figure --device`).
  DeviceContext* device = nullptr;
  Provenance provenance = {};  ///< how the figure was made: written to its run.json
};

struct Figure {
  std::string name;
  std::string title;  ///< which paper figure it reproduces
  std::function<void(const FigureContext&)> run;
  /// It measures kernels or mappings and can do so on `--device cuda|emulated`; the others are
  /// modelled (their clock is the device model) and run on the host only.
  bool on_device = false;
};

/// Every figure, in the order of docs/experiments.md.
[[nodiscard]] const std::vector<Figure>& figures();
/// Throws InvalidArgument listing the known names.
[[nodiscard]] const Figure& find_figure(const std::string& name);

}  // namespace kvlab
