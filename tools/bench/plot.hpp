// Speed against depth as SVG (written here: no plotting dependency), one polyline per series, a
// log2 depth axis with tick labels, a legend and a title; PNG through rsvg-convert when present.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kvflash/status.hpp"

namespace kvflash::bench {

struct Series {
  std::string label;                              // e.g. "f16/q4_0"
  std::vector<std::pair<double, double>> points;  // (depth, speed), depth > 0
};

struct Chart {
  std::string title;
  std::string x_label = "depth (KV tokens, log2 scale)";
  std::string y_label;  // e.g. "KV GB/s"
  std::vector<Series> series;
};

// The charts stacked vertically in one SVG document.
std::string render_svg(const std::vector<Chart>& charts);

// Writes FILE.svg, or FILE.png by converting the SVG with rsvg-convert (an error names the Debian
// package librsvg2-bin when it is missing).
Status write_plot(const std::string& path, const std::vector<Chart>& charts);

// "512", "4K", "1M": depth tick labels.
std::string depth_label(double tokens);

}  // namespace kvflash::bench
