// The loss curves of a run as an SVG image (no plotting library): train loss per step, validation loss per
// evaluation, on shared axes.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ascent::train {

void write_loss_plot(const std::string& path, const std::vector<std::pair<int64_t, double>>& train,
                     const std::vector<std::pair<int64_t, double>>& val);

}  // namespace ascent::train
