// The "monitor", "tensorboard" and "csv_monitor" sections' parser (config_monitor.cpp).
#pragma once

#include <string>

#include "util/config_section.h"

namespace zt {
struct MonitorConfig;
namespace config_detail {
// "monitor", "tensorboard" and "csv_monitor" (config_monitor.cpp); after the precision is known,
// which picks the GEMM ceiling from a bench file.
void parse_monitor(Section& root, const std::string& precision, MonitorConfig& m);
}  // namespace config_detail
}  // namespace zt
