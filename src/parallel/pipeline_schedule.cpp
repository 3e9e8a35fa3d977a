// Pipeline schedules (pipeline_schedule.h): the option checks and each stage's op order. The
// simulator and the order checker are in pipeline_simulate.cpp.
#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace zt {

// Note [Pipeline schedules]
// p stages, m micro-batches, s the stage (pipeline rank), F / B / W forward, backward (input
// gradient in zero bubble) and weight gradient.
// - gpipe: all m forwards, then all m backwards, both in micro-batch order 0..m-1 (as PyTorch's
//   ScheduleGPipe; with zero communication the reverse backward order has the same makespan,
//   (m + p - 1)(t_f + t_b)). Every stage holds all m micro-batches' activations at its peak.
// - 1f1b (PipeDream-Flush, Megatron-LM without interleaving): warm-up of min(p - s - 1, m)
//   forwards, then pairs F(w + i), B(i) while forwards remain, then the remaining backwards
//   (cool-down). Stage s never holds more than min(p - s, m) micro-batches.
// - interleaved (Megatron-LM's virtual pipeline): rank s holds v chunks, chunk c being virtual
//   stage c p + s. The k-th forward (k in [0, m v)) runs micro-batch (k / (p v)) p + k % p on chunk
//   (k % (p v)) / p: micro-batches go in groups of p through chunk 0, then the same group through
//   chunk 1, and so on; the k-th backward runs the same micro-batch on chunk v - 1 - (that chunk).
//   Warm-up of (p - s - 1) * 2 + (v - 1) p forwards, capped at m v, and all m v forwards when
//   m == p (Megatron's all-warm-up case); then F, B pairs, then the remaining backwards.
// - zero_bubble (ZB-H1, Qi et al. 2023, "Zero Bubble Pipeline Parallelism", section 3.1): the F
//   and B order of 1f1b, so the same activation memory, with each backward split into B and W.
//   Stage s lets its first s W passes wait: after the B of its j-th backward it runs the oldest
//   pending W when j >= s, and the s W passes still pending at the end close its list. Later
//   stages hold W back longest, so the first B passes travel back to stage 0 without waiting
//   behind W, and the held-back W passes fill the cool-down bubble. With t_f = t_b = t_w and
//   m >= p the simulated bubble is (p - 1) / (3 m), a third of 1f1b's, as the paper states
//   (tests/parallel/pipeline_schedule_test.cpp checks it).

const char* pipe_schedule_name(PipeSchedule s) {
    switch (s) {
        case PipeSchedule::kGpipe:
            return "gpipe";
        case PipeSchedule::kOneFOneB:
            return "1f1b";
        case PipeSchedule::kInterleaved:
            return "interleaved";
        case PipeSchedule::kZeroBubble:
            return "zero_bubble";
    }
    return "?";
}

PipeSchedule parse_pipe_schedule(std::string_view name) {
    for (PipeSchedule s : {PipeSchedule::kGpipe, PipeSchedule::kOneFOneB,
                           PipeSchedule::kInterleaved, PipeSchedule::kZeroBubble})
        if (name == pipe_schedule_name(s)) return s;
    ZT_FAIL("parallel.pipeline.schedule: unknown schedule \"", name,
            "\"; expected one of \"gpipe\", \"1f1b\", \"interleaved\", \"zero_bubble\"");
}

const char* pipe_op_kind_name(PipeOpKind k) {
    switch (k) {
        case PipeOpKind::kForward:
            return "forward";
        case PipeOpKind::kBackward:
            return "backward";
        case PipeOpKind::kWeightGrad:
            return "weight-grad";
    }
    return "?";
}

namespace {

// The checks that do not need the model's block count.
void check_options(const PipeOptions& o) {
    const char* name = pipe_schedule_name(o.schedule);
    ZT_CHECK(o.stages >= 1, "parallel.pipeline.stages must be >= 1 (got ", o.stages, ")");
    ZT_CHECK(o.micro_batches >= 1,
             "parallel.pipeline: the micro-batches per step (gradient_accumulation_steps) must be "
             ">= 1 (got ",
             o.micro_batches, ")");
    ZT_CHECK(o.virtual_stages >= 1, "parallel.pipeline.virtual_stages must be >= 1 (got ",
             o.virtual_stages, ")");
    if (o.schedule != PipeSchedule::kInterleaved) {
        ZT_CHECK(o.virtual_stages == 1, "parallel.pipeline.virtual_stages: ", o.virtual_stages,
                 " virtual stages need parallel.pipeline.schedule \"interleaved\" (got \"", name,
                 "\"); set virtual_stages to 1 or the schedule to \"interleaved\"");
        return;
    }
    ZT_CHECK(o.virtual_stages >= 2,
             "parallel.pipeline.virtual_stages: the interleaved schedule needs at least 2 virtual "
             "stages per rank (got ",
             o.virtual_stages, "); with one, use parallel.pipeline.schedule \"1f1b\"");
    if (o.micro_batches % o.stages != 0) {
        const int below = o.micro_batches / o.stages * o.stages;
        ZT_FAIL(
            "parallel.pipeline.schedule \"interleaved\" needs the micro-batches per step "
            "(gradient_accumulation_steps) to be a multiple of parallel.pipeline.stages (",
            o.stages, "), as in Megatron-LM: got ", o.micro_batches, "; use ",
            below > 0 ? str_cat(below, " or ") : std::string(), below + o.stages,
            ", or schedule \"1f1b\"");
    }
}

using StageOps = std::vector<PipeOp>;

PipeOp op(PipeOpKind kind, int micro, int chunk = 0) {
    return PipeOp{.kind = kind, .micro = micro, .chunk = chunk};
}

StageOps gpipe_stage(int m) {
    StageOps ops;
    for (int i = 0; i < m; ++i) ops.push_back(op(PipeOpKind::kForward, i));
    for (int i = 0; i < m; ++i) ops.push_back(op(PipeOpKind::kBackward, i));
    return ops;
}

// 1F1B, and with split_w ZB-H1 (Note [Pipeline schedules]).
StageOps one_f_one_b_stage(int p, int m, int s, bool split_w) {
    const int warmup = std::min(p - s - 1, m);
    StageOps ops;
    int next_w = 0;  // the oldest micro-batch whose W has not run
    auto backward = [&](int j) {
        ops.push_back(op(PipeOpKind::kBackward, j));
        if (split_w && j >= s) ops.push_back(op(PipeOpKind::kWeightGrad, next_w++));
    };
    for (int i = 0; i < warmup; ++i) ops.push_back(op(PipeOpKind::kForward, i));
    for (int i = 0; warmup + i < m; ++i) {
        ops.push_back(op(PipeOpKind::kForward, warmup + i));
        backward(i);
    }
    for (int j = m - warmup; j < m; ++j) backward(j);
    if (split_w)
        while (next_w < m) ops.push_back(op(PipeOpKind::kWeightGrad, next_w++));
    return ops;
}

// The k-th forward or backward of a rank in Megatron-LM's interleaved order.
PipeOp interleaved_op(PipeOpKind kind, int k, int p, int v) {
    const int group = k / (p * v), in_group = k % (p * v);
    int chunk = in_group / p;
    if (kind == PipeOpKind::kBackward) chunk = v - 1 - chunk;
    return op(kind, group * p + in_group % p, chunk);
}

StageOps interleaved_stage(int p, int m, int v, int s) {
    const int total = m * v;
    const int warmup = m == p ? total : std::min((p - s - 1) * 2 + (v - 1) * p, total);
    StageOps ops;
    for (int k = 0; k < warmup; ++k) ops.push_back(interleaved_op(PipeOpKind::kForward, k, p, v));
    for (int i = 0; warmup + i < total; ++i) {
        ops.push_back(interleaved_op(PipeOpKind::kForward, warmup + i, p, v));
        ops.push_back(interleaved_op(PipeOpKind::kBackward, i, p, v));
    }
    for (int k = total - warmup; k < total; ++k)
        ops.push_back(interleaved_op(PipeOpKind::kBackward, k, p, v));
    return ops;
}

}  // namespace

void validate_pipe(const PipeOptions& o, int64_t blocks) {
    check_options(o);
    const int64_t p = o.stages, v = o.virtual_stages, parts = p * v;
    if (blocks < parts) {
        if (v == 1)
            ZT_FAIL("parallel.pipeline.stages: ", p, " stages need at least ", p,
                    " blocks, the model has ", blocks, "; use at most ", blocks, " stages");
        ZT_FAIL("parallel.pipeline.stages: ", p, " stages x ", v, " virtual stages need at least ",
                parts, " blocks, the model has ", blocks, "; use fewer stages or virtual stages");
    }
    if (o.schedule == PipeSchedule::kInterleaved && blocks % parts != 0)
        ZT_FAIL("parallel.pipeline.virtual_stages: ", v, " virtual stages do not divide the ",
                blocks, " blocks over ", p, " stages evenly (", blocks, " / ", p,
                " per stage); the interleaved schedule needs a multiple of stages x virtual "
                "stages = ",
                parts, " blocks");
}

std::vector<std::vector<PipeOp>> pipe_schedule(const PipeOptions& o) {
    check_options(o);
    const int p = o.stages, m = o.micro_batches;
    std::vector<std::vector<PipeOp>> stages(static_cast<size_t>(p));
    for (int s = 0; s < p; ++s) {
        StageOps& ops = stages[static_cast<size_t>(s)];
        switch (o.schedule) {
            case PipeSchedule::kGpipe:
                ops = gpipe_stage(m);
                break;
            case PipeSchedule::kOneFOneB:
                ops = one_f_one_b_stage(p, m, s, false);
                break;
            case PipeSchedule::kZeroBubble:
                ops = one_f_one_b_stage(p, m, s, true);
                break;
            case PipeSchedule::kInterleaved:
                ops = interleaved_stage(p, m, o.virtual_stages, s);
                break;
        }
    }
    return stages;
}

double pipe_bubble_formula(const PipeOptions& o) {
    check_options(o);
    const double p = o.stages, m = o.micro_batches, v = o.virtual_stages;
    switch (o.schedule) {
        case PipeSchedule::kGpipe:
        case PipeSchedule::kOneFOneB:
            return (p - 1) / m;
        case PipeSchedule::kInterleaved:
            return (p - 1) / (v * m);
        case PipeSchedule::kZeroBubble:
            return (p - 1) / (3 * m);
    }
    ZT_ASSERT(false, "unknown pipeline schedule ", static_cast<int>(o.schedule));
    __builtin_unreachable();
}

}  // namespace zt
