#include "ascent/train/loss_plot.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>

#include "ascent/base/atomic_write.h"

namespace ascent::train {

void write_loss_plot(const std::string& path, const std::vector<std::pair<int64_t, double>>& train,
                     const std::vector<std::pair<int64_t, double>>& val) {
  const double W = 720, H = 420, L = 60, R = 20, T = 30, B = 50;
  int64_t x1 = 1;
  double y0 = INFINITY, y1 = -INFINITY;
  for (const auto* s : {&train, &val})
    for (const auto& [x, y] : *s) {
      if (!std::isfinite(y)) continue;
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  if (!(y0 <= y1)) y0 = 0, y1 = 1;
  if (y1 - y0 < 1e-9) y1 = y0 + 1;
  auto px = [&](double x) { return L + (W - L - R) * x / static_cast<double>(x1); };
  auto py = [&](double y) { return T + (H - T - B) * (1.0 - (y - y0) / (y1 - y0)); };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      W, H);
  s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n", L, H - B, W - R, H - B);
  s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n", L, T, L, H - B);
  for (int i = 0; i <= 4; ++i) {
    const double y = y0 + (y1 - y0) * i / 4.0;
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.3f}</text>\n", L - 6, py(y) + 4, y);
    const double x = static_cast<double>(x1) * i / 4.0;
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{:.0f}</text>\n", px(x), H - B + 18, x);
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">step</text>\n", (L + W - R) / 2, H - 10);
  auto line = [&](const std::vector<std::pair<int64_t, double>>& pts, const char* color) {
    std::string d;
    for (const auto& [x, y] : pts) {
      if (!std::isfinite(y)) continue;
      d += fmt::format("{}{:.1f},{:.1f}", d.empty() ? "M" : " L", px(static_cast<double>(x)), py(y));
    }
    if (!d.empty()) s += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"/>\n", d, color);
  };
  line(train, "#1f77b4");
  line(val, "#d62728");
  for (const auto& [x, y] : val)
    if (std::isfinite(y))
      s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"#d62728\"/>\n", px(static_cast<double>(x)),
                       py(y));
  s += fmt::format("<text x=\"{}\" y=\"18\" fill=\"#1f77b4\">train loss</text>\n", L + 10);
  s += fmt::format("<text x=\"{}\" y=\"18\" fill=\"#d62728\">validation loss</text>\n", L + 110);
  s += "</svg>\n";
  write_file_atomic(path, {std::span<const char>(s)});
}

}  // namespace ascent::train
