// Evaluation during training (`eval_interval`, `eval_iters`): the mean loss over held-out
// batches and the family's metrics of the outputs; with quantization-aware training, the
// quantized model's and the full-precision model's side by side. Collective over the dp group.
#pragma once

#include <nlohmann/json.hpp>

#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/pipeline_step.h"

namespace zt {

// {"eval_loss", and the family's metrics}; while quantization-aware training runs, every key
// again with "_full_precision" appended, evaluated with the quantization paused.
nlohmann::json evaluate(Engine& engine, RunData& data, const TrainConfig& cfg, Communicator* comm,
                        PipelineStep* pipe);

}  // namespace zt
