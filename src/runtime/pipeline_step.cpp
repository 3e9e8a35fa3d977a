#include "runtime/pipeline_step.h"

#include <cmath>
#include <cstdlib>

namespace zt {

namespace {

// ZT_FAULT_SKIP_SEND="stage:micro": that stage skips the send of that micro-batch's activations
// in the first step (tests of the pipeline watchdog, Note [Pipeline watchdog]).
void read_skip_send(PipelineRunOptions& o) {
    const char* v = std::getenv("ZT_FAULT_SKIP_SEND");
    if (!v || !*v) return;
    ZT_CHECK(std::sscanf(v, "%d:%d", &o.skip_send_stage, &o.skip_send_micro) == 2,
             "ZT_FAULT_SKIP_SEND: expected \"stage:micro\", got \"", v, "\"");
}

PipelineRunOptions runner_options(const TrainConfig& cfg) {
    PipelineRunOptions o;
    o.pipe = cfg.pipe.options(cfg.grad_accum);
    o.timeout_s = cfg.comm.timeout_s;
    o.forward_comm = cfg.pipe.forward_comm;
    o.backward_comm = cfg.pipe.backward_comm;
    read_skip_send(o);
    return o;
}

}  // namespace

std::unique_ptr<Model> build_pipeline_stage(const TrainConfig& cfg, const RunMesh& mesh) {
    const PipeOptions o = cfg.pipe.options(cfg.grad_accum);
    return cfg.model->build_stage(mesh.tp, pipe_stage(o, cfg.pipe.partition, mesh.coord.pp));
}

PipelineStep::PipelineStep(Engine& engine, const RunMesh& mesh, const TrainConfig& cfg)
    : runner_(engine, mesh.pp, runner_options(cfg)),
      pipe_(cfg.pipe.options(cfg.grad_accum)),
      partition_(cfg.pipe.partition) {}

void PipelineStep::add(const Batch& b) {
    ZT_CHECK(b.click == nullptr, "parallel.pipeline: click batches are not pipelined");
    Owned o{{b.inputs.begin(), b.inputs.end()}, {b.targets.begin(), b.targets.end()}};
    owned_.push_back(std::move(o));
    Batch c = b;
    batches_.push_back(c);
}

void PipelineStep::run() {
    for (size_t i = 0; i < batches_.size(); ++i) {  // spans into the copies, now that they stay
        batches_[i].inputs = owned_[i].inputs;
        batches_[i].targets = owned_[i].targets;
    }
    runner_.run(batches_);
    batches_.clear();
    owned_.clear();
}

nlohmann::json PipelineStep::metrics() const {
    const PipeStepStats& s = runner_.stats();
    nlohmann::json m = {{"bubble", s.bubble},
                        {"bubble_formula", pipe_bubble_formula(pipe_)},
                        {"busy_s", s.busy_s},
                        {"span_s", s.span_s},
                        {"peak_in_flight", s.peak_in_flight}};
    const PipeWire& w = runner_.wire();
    if (w.compressed(true) || w.compressed(false)) {
        // This stage's sends of the step (parallel.pipeline.comm_precision), as the gradients'
        // compression entry reports them: what the plain sends would have carried, and carried.
        nlohmann::json j = {{"forward", codec_kind_name(w.kind(true))},
                            {"backward", codec_kind_name(w.kind(false))}};
        m["comm_compression"] = add_compression_json(j, w.stats());
    }
    return m;
}

std::string PipelineStep::describe() const {
    std::string parts;
    for (int64_t c : partition_) parts += str_cat(parts.empty() ? "" : ", ", c);
    return str_cat(
        "pipeline: ", pipe_.stages, " stages",
        pipe_.virtual_stages > 1 ? str_cat(" x ", pipe_.virtual_stages, " virtual") : std::string(),
        ", schedule ", pipe_schedule_name(pipe_.schedule), ", ", pipe_.micro_batches,
        " micro-batches, blocks per stage [", parts, "], bubble by the formula ",
        pipe_bubble_formula(pipe_));
}

}  // namespace zt
