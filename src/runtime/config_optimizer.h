// The "optimizer" and "scheduler" sections' parsers (config_optimizer.cpp; docs/config.md), and
// helpers the other section parsers share.
#pragma once

#include <string>
#include <vector>

#include "util/config_section.h"

namespace zt {
struct OptimizerConfig;
struct TrainConfig;
struct LrScheduleOptions;
namespace config_detail {
// DeepSpeed's "optimizer" section: Adam, AdamW, SGD, Adagrad, Lion and OneBitAdam.
void parse_optimizer(Section& root, OptimizerConfig& o, std::vector<std::string>& warnings);
// The "scheduler" section (after the optimizer and the step count are known).
void parse_scheduler(Section& root, const TrainConfig& c, LrScheduleOptions& r);
// optimizer.type "OneBitAdam": refuses what it does not compose with (after every section).
void check_onebit_adam(const TrainConfig& c);
// A key that is type-checked (a bool) and changes nothing here: a warning that says why.
void warn_no_effect(Section& s, const char* k, const char* why, std::vector<std::string>& warnings);
std::string to_lower(std::string s);
}  // namespace config_detail
}  // namespace zt
