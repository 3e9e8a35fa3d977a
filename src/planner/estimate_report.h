// `zerotrain estimate` output: a text report that states the byte model of DESIGN.md and shows
// per-rank bytes by category, buffer by buffer and per checkpointing policy, or the same as JSON
// (docs/memory.md documents both).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "planner/estimate.h"

namespace zt {

// `source` names what was estimated (the config path) in the report's first line.
std::string estimate_text(const Estimate& est, const std::string& source);
nlohmann::json estimate_json(const Estimate& est, const std::string& source);

// 1234567 -> "1,234,567"
std::string group_digits(int64_t n);

}  // namespace zt
