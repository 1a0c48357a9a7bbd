#include "bench/plot.hpp"

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "bench/options.hpp"

extern char** environ;

namespace kvflash::bench {
namespace {

// Plot area inside each chart; the legend sits right of it so it never hides a line, as wide as
// its longest label needs (about 7.5 px per character at the 13 px font).
constexpr double kPlotWidth = 600, kChartHeight = 460;
constexpr double kLeft = 84, kTop = 56, kBottom = 66;
constexpr double kCharWidth = 7.5;
constexpr const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

// A step of 1, 2 or 5 times a power of ten giving about five intervals up to `top`.
double nice_step(double top) {
  const double raw = top / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

double legend_width(const std::vector<Chart>& charts) {
  size_t chars = 12;
  for (const Chart& c : charts)
    for (const Series& s : c.series) chars = std::max(chars, s.label.size());
  return 60 + kCharWidth * static_cast<double>(chars);
}

std::string render_chart(const Chart& c, double y0, double width) {
  const double pw = kPlotWidth, ph = kChartHeight - kTop - kBottom;
  double xmin = INFINITY, xmax = 0, ymax = 0;
  for (const Series& s : c.series)
    for (auto [x, y] : s.points) {
      xmin = std::min(xmin, x);
      xmax = std::max(xmax, x);
      ymax = std::max(ymax, y);
    }
  if (!std::isfinite(xmin) || !(xmin > 0)) xmin = xmax = 1;  // no points, or a bad depth
  double lx0 = std::log2(xmin), lx1 = std::log2(xmax);
  if (lx1 - lx0 < 1e-9) {  // a single depth: centre it
    lx0 -= 1;
    lx1 += 1;
  }
  const double step = nice_step(ymax > 0 ? ymax : 1);
  const double ytop = std::ceil((ymax > 0 ? ymax : 1) / step) * step;
  auto px = [&](double x) { return kLeft + (std::log2(x) - lx0) / (lx1 - lx0) * pw; };
  auto py = [&](double y) { return kTop + ph - y / ytop * ph; };

  std::string o = fmt::format("<g transform=\"translate(0,{})\">\n", y0);
  o += fmt::format(
      "<text x=\"{}\" y=\"30\" text-anchor=\"middle\" font-size=\"16\" "
      "font-weight=\"bold\">{}</text>\n",
      width / 2, escape(c.title));
  // Horizontal grid and y tick labels.
  const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step))));
  for (double y = 0; y <= ytop + step / 2; y += step) {
    o += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#dddddd\"/>\n",
                     kLeft, py(y), kLeft + pw, py(y));
    o += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.{}f}</text>\n", kLeft - 8,
                     py(y) + 4, y, decimals);
  }
  // Vertical grid at powers of two (thinned to at most ~10 labels).
  const int e0 = static_cast<int>(std::ceil(lx0 - 1e-9)),
            e1 = static_cast<int>(std::floor(lx1 + 1e-9));
  const int every = std::max(1, (e1 - e0 + 10) / 10);
  for (int e = e0; e <= e1; e += every) {
    const double x = px(std::exp2(e));
    o += fmt::format("<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#dddddd\"/>\n",
                     x, kTop, x, kTop + ph);
    o += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x,
                     kTop + ph + 20, depth_label(std::exp2(e)));
  }
  // Axes and their labels.
  o += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
      "stroke=\"#333333\"/>\n",
      kLeft, kTop, pw, ph);
  o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", kLeft + pw / 2,
                   kTop + ph + 46, escape(c.x_label));
  o += fmt::format(
      "<text transform=\"translate(22,{}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
      kTop + ph / 2, escape(c.y_label));
  // One polyline (with point markers, so a single depth still shows) per series, then its legend.
  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& s = c.series[i];
    const char* color = kColors[i % std::size(kColors)];
    // Past ten series the colours repeat: dash the repeats so every line stays distinct.
    const std::string dash =
        i < std::size(kColors)
            ? ""
            : fmt::format(" stroke-dasharray=\"{}\"", i < 2 * std::size(kColors) ? "8,4" : "2,3");
    std::string pts;
    for (auto [x, y] : s.points) pts += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    o += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{} points=\"{}\"/>\n",
                     color, dash, pts);
    for (auto [x, y] : s.points)
      o += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", px(x), py(y),
                       color);
    const double ly = kTop + 10 + 20 * static_cast<double>(i);
    o += fmt::format(
        "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"3\"{}/>\n",
        kLeft + pw + 14, ly, kLeft + pw + 38, ly, color, dash);
    o += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", kLeft + pw + 44, ly + 4,
                     escape(s.label));
  }
  return o + "</g>\n";
}

}  // namespace

std::string depth_label(double tokens) {
  const auto v = static_cast<int64_t>(std::llround(tokens));
  if (v >= (1 << 20) && v % (1 << 20) == 0) return fmt::format("{}M", v >> 20);
  if (v >= 1024 && v % 1024 == 0) return fmt::format("{}K", v >> 10);
  return fmt::format("{}", v);
}

std::string render_svg(const std::vector<Chart>& charts) {
  const double height = kChartHeight * static_cast<double>(std::max<size_t>(1, charts.size()));
  const double width = kLeft + kPlotWidth + legend_width(charts);
  std::string o = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"13\">\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n",
      width, height);
  for (size_t i = 0; i < charts.size(); ++i)
    o += render_chart(charts[i], kChartHeight * static_cast<double>(i), width);
  return o + "</svg>\n";
}

Status write_plot(const std::string& path, const std::vector<Chart>& charts) {
  const bool png = path.size() > 4 && path.compare(path.size() - 4, 4, ".png") == 0;
  const std::string svg_path = png ? path + ".svg.tmp" : path;
  {
    std::ofstream f(svg_path);
    f << render_svg(charts);
    if (!f) return invalid_argument(fmt::format("--plot: cannot write '{}'", svg_path));
  }
  if (!png) return {};
  if (!on_path("rsvg-convert"))
    return invalid_argument(fmt::format(
        "--plot {}: a .png needs rsvg-convert (Debian package librsvg2-bin); the SVG is in {}",
        path, svg_path));
  // posix_spawnp rather than system(): no shell, so no quoting of the file names.
  std::vector<std::string> args = {"rsvg-convert", "-o", path, svg_path};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int status = 0;
  if (posix_spawnp(&pid, "rsvg-convert", nullptr, nullptr, argv.data(), environ) != 0 ||
      waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return invalid_argument(
        fmt::format("--plot {}: rsvg-convert failed; the SVG is in {}", path, svg_path));
  std::remove(svg_path.c_str());
  return {};
}

}  // namespace kvflash::bench
