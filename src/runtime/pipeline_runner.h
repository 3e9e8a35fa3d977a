// PipelineRunner: one pipeline stage's part of a training step (parallel.pipeline,
// docs/pipeline-parallel.md). It runs this stage's ops of the schedule (parallel/
// pipeline_schedule.h) in order: a forward records the micro-batch's pass through one chunk of
// the model on a tape of its own and sends the output to the next stage; a backward receives the
// output's gradient, runs that tape and sends the input's gradient back; in zero bubble the
// backward leaves the weight gradients to a later weight-gradient op. Activations and gradients
// travel with nonblocking send/recv on the pipeline group. Every wait is bounded by
// comm.timeout_s and reports which stage waits for what from whom, and what that stage is doing
// (Note [Pipeline watchdog]). The schedule's order is checked for deadlocks before the first
// step. The engine (runtime/engine.h) still owns the weights, the gradients and the update.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "models/pipeline_model.h"
#include "parallel/pipeline_schedule.h"
#include "runtime/engine.h"
#include "runtime/pipeline_status.h"
#include "runtime/pipeline_wire.h"

namespace zt {

struct PipelineRunOptions {
    PipeOptions pipe;        // micro_batches: the engine's grad_accum
    double timeout_s = 600;  // comm.timeout_s; 0: wait without limit
    // Fault injection for tests (ZT_FAULT_SKIP_SEND="stage:micro"): that stage does not send the
    // activations of that micro-batch in the first step. -1: none.
    int skip_send_stage = -1;
    int skip_send_micro = -1;
    // parallel.pipeline.comm_precision: codecs of the activations sent forward and the
    // gradients sent backward (pipeline_wire.h); kF32: plain.
    CodecKind forward_comm = CodecKind::kF32;
    CodecKind backward_comm = CodecKind::kF32;
};

// One step of this stage, and the pipeline's bubble over every stage.
struct PipeStepStats {
    double busy_s = 0;       // this stage's compute (forward, backward, weight-gradient ops)
    double span_s = 0;       // this stage's first op start to last op end
    double bubble = 0;       // (p x max span - sum busy) / sum busy over the group (as the formula)
    int peak_in_flight = 0;  // most (micro-batch, chunk) activations alive at once on this stage
};

class PipelineRunner {
  public:
    // pp: the pipeline group (stage s is its rank s); the engine's model must be a PipelineModel
    // holding stage pp->rank(). Checks the schedule's order (throws zt::Error, kInput, on one
    // that would deadlock).
    PipelineRunner(Engine& engine, Communicator* pp, PipelineRunOptions o);
    PipelineRunner(const PipelineRunner&) = delete;
    PipelineRunner& operator=(const PipelineRunner&) = delete;
    ~PipelineRunner();

    // The forwards and backwards of one step's micro-batches (this dp rank's, in order; the first
    // stage reads their inputs, the last their targets), then the tied and data-parallel gradient
    // reduction (Engine::pipeline_reduce_grads). Engine::step() follows.
    void run(std::span<const Batch> batches);
    // Forward only (evaluation): the batch's mean loss, on every stage of the group.
    double eval_loss(const Batch& batch);
    // At the end of training, on every stage: retires the watchdog's status channel
    // (pipeline_status.h). A runner destroyed without it (a failed run) leaves it pending.
    void close() { status_->close(o_.timeout_s); }

    // The ops this stage ran in the last step, in order (tests compare them to the schedule).
    const std::vector<PipeOp>& executed() const { return executed_; }
    const std::vector<PipeOp>& schedule() const { return ops_; }
    const PipeStepStats& stats() const { return stats_; }
    // The last step's bytes and error of the compressed sends (parallel.pipeline.comm_precision).
    const PipeWire& wire() const { return wire_; }

  private:
    struct Slot;
    void forward(const PipeOp& op, const Batch& batch);
    void backward(const PipeOp& op, const Batch& batch);
    void weight_grad(const PipeOp& op);
    // Waits for a point-to-point op under the watchdog; `what` and `micro`/`chunk` describe it.
    void wait(const CommHandle& h, bool activations, bool receiving, int micro, int peer_vs);
    void send(const Tensor& t, bool activations, int micro, int to_vs);
    Tensor recv(const Shape& shape, bool activations, int micro, int from_vs);
    int tag(bool activations, int micro, int vs) const;
    void retire_sends(bool all);
    std::string describe(const PipeOp& op) const;

    Engine& engine_;
    PipelineModel& model_;
    Communicator* pp_;
    PipelineRunOptions o_;
    int stage_ = 0;
    std::vector<PipeOp> ops_;
    std::vector<PipeOp> executed_;
    std::vector<std::unique_ptr<Slot>> slots_;  // micro * v + chunk
    struct PendingSend {
        CommHandle h;
        Tensor buf;
        int micro, vs;
        bool activations;
        std::shared_ptr<std::vector<uint8_t>> bytes;  // the encoding in flight, when compressed
    };
    std::vector<PendingSend> sends_;
    std::vector<double> losses_;  // per micro-batch, on the stage that holds the last piece
    PipeStepStats stats_;
    int in_flight_ = 0;
    int64_t steps_run_ = 0;
    const PipeOp* current_ = nullptr;         // the op this stage is in (for the watchdog report)
    std::unique_ptr<PipelineStatus> status_;  // what this stage does, for the others' watchdog
    PipeWire wire_;
};

}  // namespace zt
