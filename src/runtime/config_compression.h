// The "compression" section's parser (config_compression.cpp): pruning now; quantization-aware
// training is refused until it exists.
#pragma once

#include "util/config_section.h"

namespace zt {
struct TrainConfig;
namespace config_detail {
// Reads compression.pruning into c.pruning; after parallel is known (pruning refuses tensor and
// pipeline parallelism in this version).
void parse_compression(Section& root, TrainConfig& c);
}  // namespace config_detail
}  // namespace zt
