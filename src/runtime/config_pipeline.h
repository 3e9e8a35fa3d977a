// The "parallel.pipeline" key's parser and its resolution against the model (config_pipeline.cpp).
#pragma once

#include <cstdint>
#include <optional>

#include "util/config_section.h"

namespace zt {
struct PipelineConfig;
struct TrainConfig;
namespace config_detail {
// Reads parallel.pipeline from the "parallel" section: an integer (the stages, other keys at
// their defaults) or {"stages", "schedule", "virtual_stages", "micro_batches", "partition"}.
// micro_batches, when given, is returned for the batch arithmetic (gradient_accumulation_steps).
void parse_pipeline(Section& parallel, PipelineConfig& p, std::optional<int64_t>& micro_batches);
// After the model, batch and ZeRO are known: checks the options against the model's blocks
// (parallel/pipeline_schedule.h validate_pipe), fills a balanced partition when none was given,
// and refuses what does not compose with a pipeline in this version.
void resolve_pipeline(TrainConfig& c);
}  // namespace config_detail
}  // namespace zt
