// The trainer's pipeline part (parallel.pipeline): the runner of this rank's stage, and one
// step's micro-batches copied as they are read (a RunData batch is valid only until the next
// read, and a pipeline step needs all of them at once).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "runtime/config.h"
#include "runtime/pipeline_runner.h"
#include "runtime/run_mesh.h"

namespace zt {

// The model piece of this rank for the config's pipeline and tensor split.
std::unique_ptr<Model> build_pipeline_stage(const TrainConfig& cfg, const RunMesh& mesh);

class PipelineStep {
  public:
    PipelineStep(Engine& engine, const RunMesh& mesh, const TrainConfig& cfg);
    void add(const Batch& b);  // the step's next micro-batch (token batches: copied)
    void run();                // the step's forwards and backwards; clears the batches
    double eval_loss(const Batch& b) { return runner_.eval_loss(b); }
    void finish() { runner_.close(); }  // at the end of training, on every rank
    // For the metrics line: the bubble over the group and this stage's figures.
    nlohmann::json metrics() const;
    // One line for the start of the run ("pipeline: 2 stages, 1f1b, 4 micro-batches, ...").
    std::string describe() const;

  private:
    struct Owned {
        std::vector<int32_t> inputs, targets;
    };
    PipelineRunner runner_;
    PipeOptions pipe_;
    std::vector<int64_t> partition_;
    std::vector<Owned> owned_;
    std::vector<Batch> batches_;
};

}  // namespace zt
