// Pipeline runner (pipeline_runner.h).
#include "runtime/pipeline_runner.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "util/timer.h"

// Note [Pipeline watchdog]
// Point-to-point ops are not collectives, so the communicator's watchdog (comm/watchdog.h) does
// not bound them; the runner polls each wait and, past comm.timeout_s, throws a zt::Error that
// says which stage waits for what from whom, the op it is in, where the schedule has the other
// stage send it, and what that stage is doing now:
//   pipeline watchdog: stage 1 (forward of micro-batch 2) waits for the activations of
//   micro-batch 2 from stage 0 for 2 s (comm.timeout_s); by the schedule, stage 0 sends them in
//   op 4 of 8 (forward of micro-batch 2); stage 0 is in backward of micro-batch 1, waiting for
//   the gradients of micro-batch 1 from stage 1; a stage is slow, dead, or skipped a send
// The other stage's activity comes over a status channel (pipeline_status.h): every wait loop
// answers requests there, so a stage that itself waits (the usual case in a hang) answers; one
// that computes or died does not, and the report says so. Under MPI the trainer then ends the
// job (MPI_Abort); the communicator abandons the receives left pending (mpi_comm.cpp). A
// schedule whose order cannot complete is refused before the first step (check_pipe_order), so a
// timeout means a stage is slow, dead, or did not send.

namespace zt {

struct PipelineRunner::Slot {
    std::unique_ptr<Tape> tape;
    Var in;   // the received activations (requires grad), null on the first piece
    Var out;  // the output (or the loss on the last piece), until backward
    Tape::Deferred weight_grads;  // zero bubble: the W pass of this (micro, chunk)
};

namespace {

PipelineModel& pipeline_model(Engine& e) {
    auto* m = dynamic_cast<PipelineModel*>(&e.model());
    ZT_CHECK(m != nullptr, "parallel.pipeline: the model is not split into pipeline stages");
    return *m;
}

}  // namespace

PipelineRunner::PipelineRunner(Engine& engine, Communicator* pp, PipelineRunOptions o)
    : engine_(engine),
      model_(pipeline_model(engine)),
      pp_(pp),
      o_(o),
      wire_(o.forward_comm, o.backward_comm) {
    ZT_CHECK(pp_ != nullptr && pp_->size() == o_.pipe.stages, "pipeline runner: a group of ",
             pp_ ? pp_->size() : 0, " ranks for ", o_.pipe.stages, " stages");
    ZT_CHECK(o_.pipe.micro_batches == engine_.options().grad_accum,
             "parallel.pipeline.micro_batches (", o_.pipe.micro_batches,
             ") must equal gradient_accumulation_steps (", engine_.options().grad_accum, ")");
    stage_ = pp_->rank();
    ZT_ASSERT(
        model_.stage().stage == stage_ && model_.stage().chunk_count() == o_.pipe.virtual_stages,
        "pipeline runner: the model holds stage ", model_.stage().stage, " with ",
        model_.stage().chunk_count(), " chunks, this rank is stage ", stage_);
    const std::vector<std::vector<PipeOp>> all = pipe_schedule(o_.pipe);
    check_pipe_order(o_.pipe, all);  // a schedule that would deadlock fails here, not in a step
    ops_ = all[static_cast<size_t>(stage_)];
    status_ = std::make_unique<PipelineStatus>(*pp_);
    const size_t n = static_cast<size_t>(o_.pipe.micro_batches) * o_.pipe.virtual_stages;
    for (size_t i = 0; i < n; ++i) slots_.push_back(std::make_unique<Slot>());
}

PipelineRunner::~PipelineRunner() {
    for (PendingSend& s : sends_) try {
            s.h->wait();
        } catch (...) {
        }
}

int PipelineRunner::tag(bool activations, int micro, int vs) const {
    const int V = o_.pipe.stages * o_.pipe.virtual_stages;
    return ((activations ? 0 : 1) * o_.pipe.micro_batches + micro) * V + vs;
}

std::string PipelineRunner::describe(const PipeOp& op) const {
    std::string s = str_cat(pipe_op_kind_name(op.kind), " of micro-batch ", op.micro);
    if (o_.pipe.virtual_stages > 1) s += str_cat(" (chunk ", op.chunk, ")");
    return s;
}

void PipelineRunner::retire_sends(bool all) {
    while (!sends_.empty() && (all || sends_.front().h->test())) {
        const PendingSend& s = sends_.front();
        wait(s.h, s.activations, false, s.micro, s.vs);
        sends_.erase(sends_.begin());
    }
}

void PipelineRunner::send(const Tensor& t, bool activations, int micro, int to_vs) {
    const int to = to_vs % o_.pipe.stages;
    if (activations && steps_run_ == 0 && stage_ == o_.skip_send_stage &&
        micro == o_.skip_send_micro)
        return;                           // the planted fault (PipelineRunOptions::skip_send_*)
    if (wire_.compressed(activations)) {  // parallel.pipeline.comm_precision
        auto bytes = wire_.encode(activations, t);
        CommHandle h = pp_->send(bytes->data(), static_cast<int64_t>(bytes->size()), CommType::kU8,
                                 to, tag(activations, micro, to_vs));
        sends_.push_back({std::move(h), t, micro, to_vs, activations, std::move(bytes)});
        retire_sends(false);
        return;
    }
    CommHandle h =
        pp_->send(t.raw(), t.numel(), comm_type_of(t.dtype()), to, tag(activations, micro, to_vs));
    sends_.push_back({std::move(h), t, micro, to_vs, activations, nullptr});
    retire_sends(false);
}

Tensor PipelineRunner::recv(const Shape& shape, bool activations, int micro, int from_vs) {
    const int me = activations ? from_vs + 1 : from_vs - 1;  // the receiving virtual stage
    Tensor t = Tensor::empty(engine_.pool(), shape, engine_.options().compute_dtype,
                             MemCategory::kActivations);
    if (wire_.compressed(activations)) {
        std::vector<uint8_t> bytes(
            static_cast<size_t>(wire_.encoded_bytes(activations, t.numel())));
        CommHandle h = pp_->recv(bytes.data(), static_cast<int64_t>(bytes.size()), CommType::kU8,
                                 from_vs % o_.pipe.stages, tag(activations, micro, me));
        wait(h, activations, true, micro, from_vs);
        wire_.decode(activations, bytes, t);
        return t;
    }
    CommHandle h = pp_->recv(t.raw(), t.numel(), comm_type_of(t.dtype()), from_vs % o_.pipe.stages,
                             tag(activations, micro, me));
    wait(h, activations, true, micro, from_vs);
    return t;
}

void PipelineRunner::wait(const CommHandle& h, bool activations, bool receiving, int micro,
                          int peer_vs) {
    if (!h->test()) {
        const int peer = peer_vs % o_.pipe.stages;
        const StageActivity before = status_->get();
        StageActivity waiting = before;
        waiting.waiting = receiving ? (activations ? 1 : 2) : 3;
        waiting.peer = peer;
        waiting.wait_micro = micro;
        status_->set(waiting);
        Stopwatch sw;
        int polls = 0;
        h->need();
        while (!h->test()) {
            status_->serve();
            if (o_.timeout_s > 0 && sw.elapsed_s() > o_.timeout_s) {
                const int peer_chunk = peer_vs / o_.pipe.stages;
                std::string msg =
                    str_cat("pipeline watchdog: stage ", stage_,
                            current_ ? str_cat(" (", describe(*current_), ")") : std::string(),
                            receiving ? " waits for the " : " waits to send the ",
                            activations ? "activations" : "gradients", " of micro-batch ", micro,
                            receiving ? " from stage " : " to stage ", peer, " for ", o_.timeout_s,
                            " s (comm.timeout_s)");
                if (receiving) {
                    // Where the peer's schedule sends it: after its forward (activations) or
                    // backward (gradients) of the micro-batch on its chunk.
                    const std::vector<PipeOp> theirs =
                        pipe_schedule(o_.pipe)[static_cast<size_t>(peer)];
                    const PipeOp want{activations ? PipeOpKind::kForward : PipeOpKind::kBackward,
                                      micro, peer_chunk};
                    const auto it = std::find(theirs.begin(), theirs.end(), want);
                    if (it != theirs.end())
                        msg += str_cat("; by the schedule, stage ", peer, " sends them in op ",
                                       it - theirs.begin() + 1, " of ", theirs.size(), " (",
                                       describe(want), ")");
                }
                // What the peer does now, if it answers (it does while it waits itself).
                const std::optional<StageActivity> theirs =
                    status_->ask(peer, std::clamp(o_.timeout_s / 4, 0.5, 10.0));
                msg += theirs ? str_cat("; stage ", peer, " is ",
                                        describe_activity(*theirs, o_.pipe.virtual_stages))
                              : str_cat("; stage ", peer, " did not answer (computing, or gone)");
                msg += "; a stage is slow, dead, or skipped a send";
                throw Error(ErrorKind::kInternal, __FILE__, __LINE__, msg);
            }
            if (++polls < 64)
                std::this_thread::yield();
            else
                std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
        status_->set(before);
    }
    h->wait();  // rethrows the op's error
}

void PipelineRunner::forward(const PipeOp& op, const Batch& batch) {
    const PipeStage& st = model_.stage();
    const int vs = st.virtual_stage(op.chunk);
    Slot& s = *slots_[static_cast<size_t>(op.micro * o_.pipe.virtual_stages + op.chunk)];
    if (!st.first_piece(op.chunk))
        s.in = make_var(recv(model_.boundary_shape(batch), true, op.micro, vs - 1), true);
    Stopwatch sw;
    s.tape = std::make_unique<Tape>(engine_.pool());
    s.tape->set_check_finite(engine_.options().nan_policy == NanPolicy::kStop);
    s.out = model_.forward_chunk(*s.tape, op.chunk, s.in, batch);
    stats_.busy_s += sw.elapsed_s();
    if (st.last_piece(op.chunk))
        losses_[static_cast<size_t>(op.micro)] = s.out->value.data<float>()[0];
    else
        send(s.out->value, true, op.micro, vs + 1);
    ++in_flight_;
    stats_.peak_in_flight = std::max(stats_.peak_in_flight, in_flight_);
}

void PipelineRunner::backward(const PipeOp& op, const Batch& batch) {
    const PipeStage& st = model_.stage();
    const int vs = st.virtual_stage(op.chunk);
    Slot& s = *slots_[static_cast<size_t>(op.micro * o_.pipe.virtual_stages + op.chunk)];
    ZT_ASSERT(s.tape != nullptr, "pipeline: backward before forward of micro-batch ", op.micro);
    Tensor dy;
    if (!st.last_piece(op.chunk)) dy = recv(model_.boundary_shape(batch), false, op.micro, vs + 1);
    Stopwatch sw;
    const bool split = o_.pipe.schedule == PipeSchedule::kZeroBubble;
    s.tape->set_deferred(split ? &s.weight_grads : nullptr);
    if (st.last_piece(op.chunk))
        s.tape->backward(s.out, engine_.micro_loss_seed());
    else
        s.tape->backward_from(std::move(s.out), std::move(dy));
    s.out = nullptr;
    stats_.busy_s += sw.elapsed_s();
    if (!st.first_piece(op.chunk)) {
        ZT_ASSERT(s.in->grad.defined(), "pipeline: no input gradient for micro-batch ", op.micro);
        send(s.in->grad, false, op.micro, vs - 1);
    }
    s.in = nullptr;
    if (!split) s.tape.reset();
    --in_flight_;
}

void PipelineRunner::weight_grad(const PipeOp& op) {
    Slot& s = *slots_[static_cast<size_t>(op.micro * o_.pipe.virtual_stages + op.chunk)];
    Stopwatch sw;
    for (auto& f : s.weight_grads) f();
    s.weight_grads.clear();
    s.tape.reset();
    stats_.busy_s += sw.elapsed_s();
}

void PipelineRunner::run(std::span<const Batch> batches) {
    ZT_CHECK(static_cast<int>(batches.size()) == o_.pipe.micro_batches,
             "pipeline: ", batches.size(), " micro-batches for a schedule of ",
             o_.pipe.micro_batches);
    executed_.clear();
    stats_ = PipeStepStats{};
    wire_.reset_stats();
    in_flight_ = 0;
    losses_.assign(batches.size(), 0.0);
    engine_.pipeline_begin_forwards();
    Stopwatch span;
    for (const PipeOp& op : ops_) {
        current_ = &op;
        status_->set({static_cast<int>(op.kind), op.micro, op.chunk, 0, -1, 0});
        const Batch& b = batches[static_cast<size_t>(op.micro)];
        switch (op.kind) {
            case PipeOpKind::kForward:
                forward(op, b);
                break;
            case PipeOpKind::kBackward:
                backward(op, b);
                break;
            case PipeOpKind::kWeightGrad:
                weight_grad(op);
                break;
        }
        executed_.push_back(op);
    }
    retire_sends(true);
    current_ = nullptr;
    status_->set({});
    stats_.span_s = span.elapsed_s();
    // Every stage counts the micro-batches; the losses are the last stage's (0 elsewhere).
    for (double loss : losses_) engine_.pipeline_micro_done(loss);
    // The bubble over the group, as pipe_bubble_formula defines it.
    const int p = o_.pipe.stages;
    std::vector<double> mine = {stats_.busy_s, stats_.span_s}, all(2 * static_cast<size_t>(p));
    pp_->all_gather(mine.data(), all.data(), std::vector<int64_t>(static_cast<size_t>(p), 2),
                    CommType::kF64)
        ->wait();
    double busy = 0, makespan = 0;
    for (int s = 0; s < p; ++s) {
        busy += all[2 * static_cast<size_t>(s)];
        makespan = std::max(makespan, all[2 * static_cast<size_t>(s) + 1]);
    }
    stats_.bubble = busy > 0 ? (p * makespan - busy) / busy : 0;
    engine_.pipeline_reduce_grads();
    ++steps_run_;
}

double PipelineRunner::eval_loss(const Batch& batch) {
    const PipeStage& st = model_.stage();
    const CompressionStats train_stats = wire_.stats();  // evaluation's sends are not counted
    engine_.pipeline_begin_forwards();
    double loss = 0;
    for (int c = 0; c < st.chunk_count(); ++c) {
        const int vs = st.virtual_stage(c);
        Var x;
        if (!st.first_piece(c)) x = make_var(recv(model_.boundary_shape(batch), true, 0, vs - 1));
        Tape tape(engine_.pool());
        tape.set_recording(false);
        Var out = model_.forward_chunk(tape, c, x, batch);
        if (st.last_piece(c))
            loss = out->value.data<float>()[0];
        else
            send(out->value, true, 0, vs + 1);
    }
    retire_sends(true);
    wire_.reset_stats();
    wire_.stats_add(train_stats);
    pp_->all_reduce(&loss, 1, CommType::kF64)->wait();  // the last stage's, everywhere
    return loss;
}

}  // namespace zt
