// The "compression" section's parser (config_compression.cpp): pruning and quantization-aware
// training.
#pragma once

#include "util/config_section.h"

namespace zt {
struct TrainConfig;
namespace config_detail {
// Reads compression.pruning and compression.quantization into c.pruning and c.quantization;
// after parallel is known (both refuse tensor and pipeline parallelism in this version).
void parse_compression(Section& root, TrainConfig& c);
}  // namespace config_detail
}  // namespace zt
