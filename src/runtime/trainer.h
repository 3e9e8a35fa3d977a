// The `zerotrain train` loop of one rank: builds the model, data, optimizer and engine from a
// TrainConfig, runs `steps` optimizer steps with evaluation, and (rank 0) writes
// RUN_DIR/metrics.jsonl and the final weights (RUN_DIR/model.safetensors, in the layout of the
// model family's PyTorch reference) and
// shows progress. With a communicator, every rank of the data-parallel group calls it with the
// same config; each reads only its own samples.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "runtime/config.h"
#include "runtime/engine.h"

namespace zt {

struct TrainResult {
    int64_t steps = 0;           // optimizer steps done, those before a resume included
    int64_t resumed_from = -1;   // the step of the checkpoint resumed from; -1: a fresh start
    bool preempted = false;      // stopped early by SIGTERM after writing a checkpoint
    double final_loss = 0;       // loss of the last step
    double final_eval_loss = -1; // last evaluation, -1 if none ran
    double tokens_per_s = 0;     // over the whole run, first step excluded; samples/s for a
                                 // model without tokens (ModelFamily::tokens_per_sample 0)
};

struct TrainOptions {
    std::string run_dir;
    bool tty = false;   // draw a progress bar instead of plain lines
    bool quiet = false; // no progress output at all (tests)
    std::string memory_timeline;  // --memory-timeline FILE: one JSON line per allocation and free
    // --resume: kLatest continues from the newest valid checkpoint (an error when there is
    // none); kAuto continues when there is one and starts fresh otherwise.
    enum class Resume { kNo, kLatest, kAuto } resume = Resume::kNo;
    bool overwrite = false;  // --overwrite: a fresh start may delete the run's old checkpoints
};

// Where the run's checkpoints go: checkpoint.dir, else RUN_DIR/checkpoints.
std::string checkpoint_dir(const TrainConfig& cfg, const std::string& run_dir);
// Refuses (kInput) a fresh start in a run whose checkpoint directory holds checkpoints, unless
// `overwrite`; the check every rank makes before training starts.
void check_fresh_start(const TrainConfig& cfg, const TrainOptions& options);

// SIGTERM (and SIGINT) make every rank finish its step, write a checkpoint and stop cleanly.
void install_preemption_handler();

// Model and engine for a config (also used by `export` and by tests).
std::unique_ptr<Model> build_model(const TrainConfig& cfg);
EngineOptions engine_options(const TrainConfig& cfg);

// comm: the data-parallel group (null: one process). Collective: every rank calls it.
TrainResult run_training(const TrainConfig& cfg, const TrainOptions& options,
                         Communicator* comm = nullptr);

// Before training on several ranks: every rank learns whether all of them parsed the config
// (`error` non-empty: this rank's parse failed) and whether they hold the same config (`digest`
// of it). Throws the same kInput error on every rank when not, so all of them exit cleanly.
void agree_on_config(Communicator& comm, uint64_t digest, const std::string& error);

}  // namespace zt
