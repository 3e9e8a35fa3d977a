// The "compression" section's parser (config_compression.cpp): pruning, quantization-aware
// training and compressed gradient communication.
#pragma once

#include <string>
#include <vector>

#include "util/config_section.h"

namespace zt {
struct TrainConfig;
namespace config_detail {
// Reads compression.pruning, .quantization and .gradients into c.pruning, c.quantization and
// c.grad_compression; after parallel and precision are known (pruning and quantization refuse
// tensor and pipeline parallelism in this version).
void parse_compression(Section& root, TrainConfig& c, std::vector<std::string>& warnings);
}  // namespace config_detail
}  // namespace zt
