// The `zerotrain train` loop for one process: builds the model, data, optimizer and engine from a
// TrainConfig, runs `steps` optimizer steps with evaluation, writes RUN_DIR/metrics.jsonl and the
// final weights (RUN_DIR/model.safetensors, nanoGPT layout), and shows progress.
#pragma once

#include <memory>
#include <string>

#include "nn/gpt.h"
#include "runtime/config.h"
#include "runtime/engine.h"

namespace zt {

struct TrainResult {
    int64_t steps = 0;
    double final_loss = 0;       // loss of the last step
    double final_eval_loss = -1; // last evaluation, -1 if none ran
    double tokens_per_s = 0;     // over the whole run, first step excluded
};

struct TrainOptions {
    std::string run_dir;
    bool tty = false;   // draw a progress bar instead of plain lines
    bool quiet = false; // no progress output at all (tests)
    std::string memory_timeline;  // --memory-timeline FILE: one JSON line per allocation and free
};

// Model and engine for a config (also used by `export` and by tests).
std::unique_ptr<Gpt> build_gpt(const TrainConfig& cfg);
EngineOptions engine_options(const TrainConfig& cfg);

TrainResult run_training(const TrainConfig& cfg, const TrainOptions& options);

}  // namespace zt
