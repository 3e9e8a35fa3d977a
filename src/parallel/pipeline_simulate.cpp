// Pipeline simulator and order checker (pipeline_schedule.h): runs each stage's op list in order
// against the ops' data dependencies, with zero communication time. An order that cannot finish
// is reported with the op each stuck stage is blocked at and what that op waits for.
#include <algorithm>
#include <optional>
#include <span>
#include <string>

#include "parallel/pipeline_schedule.h"
#include "util/error.h"

namespace zt {

namespace {

constexpr int kKinds = 3;  // PipeOpKind values

// An op placed on the model: its virtual stage (chunk * p + stage) and micro-batch.
struct PlacedOp {
    PipeOpKind kind;
    int vstage;
    int micro;
};

// An op's inputs: at most two, held in place (the simulator asks for them once per op and per
// look at a blocked stage; a vector each time was most of its cost in the planner's search).
struct Inputs {
    PlacedOp in[2];
    int n = 0;
    const PlacedOp* begin() const { return in; }
    const PlacedOp* end() const { return in + n; }
};

class PipeRun {
  public:
    PipeRun(const PipeOptions& o, const std::vector<std::vector<PipeOp>>& ops)
        : o_(o), ops_(ops), p_(o.stages), vstages_(o.stages * o.virtual_stages) {
        for (auto& d : done_) d.assign(static_cast<size_t>(vstages_) * o.micro_batches, -1.0);
    }

    // Executes the lists to the end; throws zt::Error naming the stuck stages on a deadlock.
    // An op of virtual stage k costs its kind's cost times scale[k] (1 where scale is empty).
    PipeTimeline run(double t_f, double t_b, double t_w, std::span<const double> scale);

  private:
    double& done(PipeOpKind k, int vstage, int micro) {
        return done_[static_cast<int>(k)]
                    [static_cast<size_t>(vstage) * o_.micro_batches + static_cast<size_t>(micro)];
    }
    PlacedOp place(int stage, const PipeOp& op) const {
        return PlacedOp{op.kind, op.chunk * p_ + stage, op.micro};
    }
    Inputs inputs(int stage, const PipeOp& op) const;
    // The first input of `op` that is not done yet, if any.
    std::optional<PlacedOp> missing_input(int stage, const PipeOp& op);
    std::string describe(const PipeOp& op) const;
    std::string describe_wait(int stage, const PipeOp& op, const PlacedOp& need,
                              const std::vector<size_t>& next) const;

    const PipeOptions& o_;
    const std::vector<std::vector<PipeOp>>& ops_;
    int p_, vstages_;
    std::vector<double> done_[kKinds];  // end time of each (kind, vstage, micro); -1 not run yet
};

// The ops whose results `op` consumes (none for the forward of the first virtual stage).
Inputs PipeRun::inputs(int stage, const PipeOp& op) const {
    const int v = place(stage, op).vstage;
    Inputs r;
    switch (op.kind) {
        case PipeOpKind::kForward:
            if (v > 0) r.in[r.n++] = PlacedOp{PipeOpKind::kForward, v - 1, op.micro};
            return r;
        case PipeOpKind::kBackward:
            r.in[r.n++] = PlacedOp{PipeOpKind::kForward, v, op.micro};
            if (v + 1 < vstages_) r.in[r.n++] = PlacedOp{PipeOpKind::kBackward, v + 1, op.micro};
            return r;
        case PipeOpKind::kWeightGrad:
            r.in[r.n++] = PlacedOp{PipeOpKind::kBackward, v, op.micro};
            return r;
    }
    ZT_ASSERT(false, "unknown pipeline op kind ", static_cast<int>(op.kind));
    __builtin_unreachable();
}

std::optional<PlacedOp> PipeRun::missing_input(int stage, const PipeOp& op) {
    for (const PlacedOp& in : inputs(stage, op))
        if (done(in.kind, in.vstage, in.micro) < 0) return in;
    return std::nullopt;
}

std::string PipeRun::describe(const PipeOp& op) const {
    std::string s = str_cat(pipe_op_kind_name(op.kind), " of micro-batch ", op.micro);
    if (o_.virtual_stages > 1) s += str_cat(" on chunk ", op.chunk);
    return s;
}

std::string PipeRun::describe_wait(int stage, const PipeOp& op, const PlacedOp& need,
                                   const std::vector<size_t>& next) const {
    const int from = need.vstage % p_;
    const PipeOp need_op{need.kind, need.micro, need.vstage / p_};
    std::string s = str_cat("stage ", stage, " is blocked at ", describe(op), " (op ",
                            next[stage] + 1, " of ", ops_[stage].size(), "): it waits for ");
    if (from == stage && need_op.chunk == op.chunk)
        return s + str_cat("its own ", describe(need_op), ", which comes later in its list");
    s += str_cat(need.kind == PipeOpKind::kForward ? "the activations" : "the gradient",
                 " of micro-batch ", need.micro);
    s += o_.virtual_stages > 1 ? str_cat(" from chunk ", need_op.chunk, " of stage ", from)
                               : str_cat(" from stage ", from);
    if (next[from] < ops_[from].size())
        s += str_cat(", which is blocked at ", describe(ops_[from][next[from]]));
    return s;
}

PipeTimeline PipeRun::run(double t_f, double t_b, double t_w, std::span<const double> scale) {
    const bool split = o_.schedule == PipeSchedule::kZeroBubble;
    const double cost[kKinds] = {t_f, split ? t_b : t_b + t_w, t_w};
    std::vector<size_t> next(static_cast<size_t>(p_), 0);
    std::vector<double> stage_free(static_cast<size_t>(p_), 0.0);  // when each stage is free
    PipeTimeline t;
    t.busy.assign(static_cast<size_t>(p_), 0.0);
    size_t left = 0;
    for (const auto& list : ops_) left += list.size();
    const size_t total = left;
    // Note [Simulation by worklist]
    // A stage runs its list until an op finds an input missing; an op done can unblock only the
    // stages that consume it (a forward: the next virtual stage's owner and its own backward's
    // stage; a backward: the previous virtual stage's owner and its own weight-grad), so only
    // those are looked at again, instead of every stage in sweeps. Each op's times depend only
    // on its stage's previous op and its inputs' end times, so the order stages are run in does
    // not change the timeline: the sweeps gave the same bits at O(stages) checks per op.
    std::vector<int> work;
    std::vector<char> queued(static_cast<size_t>(p_), 1);
    for (int s = p_ - 1; s >= 0; --s) work.push_back(s);
    const auto wake = [&](int vstage) {
        if (vstage < 0 || vstage >= vstages_) return;
        const int st = vstage % p_;
        if (!queued[static_cast<size_t>(st)]) {
            queued[static_cast<size_t>(st)] = 1;
            work.push_back(st);
        }
    };
    while (left > 0 && !work.empty()) {
        const int s = work.back();
        work.pop_back();
        queued[static_cast<size_t>(s)] = 0;
        // Run stage s's list until an op finds an input missing.
        while (next[s] < ops_[s].size()) {
            const PipeOp& op = ops_[s][next[s]];
            if (missing_input(s, op)) break;
            // The op starts once its stage is free and the last of its inputs is done.
            double start = stage_free[s];
            for (const PlacedOp& in : inputs(s, op))
                start = std::max(start, done(in.kind, in.vstage, in.micro));
            const int vs = place(s, op).vstage;
            const double c = cost[static_cast<int>(op.kind)] *
                             (scale.empty() ? 1.0 : scale[static_cast<size_t>(vs)]);
            stage_free[s] = done(op.kind, vs, op.micro) = start + c;
            t.busy[s] += c;
            ++next[s];
            --left;
            if (op.kind == PipeOpKind::kForward) wake(vs + 1);
            if (op.kind == PipeOpKind::kBackward) wake(vs - 1);
        }
    }
    if (left > 0) {
        std::string why;
        for (int s = 0; s < p_; ++s) {
            if (next[s] >= ops_[s].size()) continue;
            const PipeOp& op = ops_[s][next[s]];
            why +=
                str_cat(why.empty() ? "" : "; ", describe_wait(s, op, *missing_input(s, op), next));
        }
        ZT_FAIL("pipeline order deadlocks with ", left, " of ", total, " ops left: ", why);
    }
    t.makespan = *std::max_element(stage_free.begin(), stage_free.end());
    double busy = 0;
    for (double b : t.busy) busy += b;
    t.bubble = busy > 0 ? (p_ * t.makespan - busy) / busy : 0.0;
    for (const auto& list : ops_) {
        int alive = 0, peak = 0, pending = 0, peak_pending = 0;
        for (const PipeOp& op : list) {
            if (op.kind == PipeOpKind::kForward) peak = std::max(peak, ++alive);
            if (op.kind == PipeOpKind::kBackward) --alive;
            if (op.kind == PipeOpKind::kBackward && o_.schedule == PipeSchedule::kZeroBubble)
                peak_pending = std::max(peak_pending, ++pending);
            if (op.kind == PipeOpKind::kWeightGrad) --pending;
        }
        t.peak_in_flight.push_back(peak);
        t.peak_pending_w.push_back(peak_pending);
    }
    return t;
}

// Each stage's list holds exactly the ops of a complete step: one forward and one backward per
// (micro, chunk), and one W in zero bubble only.
void check_complete(const PipeOptions& o, const std::vector<std::vector<PipeOp>>& ops) {
    const int p = o.stages, m = o.micro_batches, v = o.virtual_stages;
    const bool split = o.schedule == PipeSchedule::kZeroBubble;
    ZT_CHECK(ops.size() == static_cast<size_t>(p), "pipeline order: ", ops.size(),
             " stage lists for ", p, " stages");
    for (int s = 0; s < p; ++s) {
        std::vector<int> count(static_cast<size_t>(kKinds * m * v), 0);
        for (const PipeOp& op : ops[s]) {
            ZT_CHECK(op.micro >= 0 && op.micro < m && op.chunk >= 0 && op.chunk < v, "stage ", s,
                     ": ", pipe_op_kind_name(op.kind), " of micro-batch ", op.micro, " on chunk ",
                     op.chunk, " is outside ", m, " micro-batches and ", v, " chunks");
            ZT_CHECK(split || op.kind != PipeOpKind::kWeightGrad, "stage ", s,
                     ": a separate weight-grad op (micro-batch ", op.micro,
                     ") belongs to the zero_bubble schedule only, not \"",
                     pipe_schedule_name(o.schedule), "\"");
            ++count[static_cast<size_t>((static_cast<int>(op.kind) * v + op.chunk) * m + op.micro)];
        }
        for (int k = 0; k < (split ? kKinds : 2); ++k)
            for (int c = 0; c < v; ++c)
                for (int i = 0; i < m; ++i) {
                    const int n = count[static_cast<size_t>((k * v + c) * m + i)];
                    ZT_CHECK(n == 1, "stage ", s, " runs ",
                             pipe_op_kind_name(static_cast<PipeOpKind>(k)), " of micro-batch ", i,
                             v > 1 ? str_cat(" on chunk ", c) : std::string(), " ", n,
                             " times; expected once");
                }
    }
}

}  // namespace

void check_pipe_order(const PipeOptions& o, const std::vector<std::vector<PipeOp>>& ops) {
    simulate_pipe(o, ops, 1.0, 1.0, 1.0);
}

PipeTimeline simulate_pipe(const PipeOptions& o, const std::vector<std::vector<PipeOp>>& ops,
                           double t_f, double t_b, double t_w,
                           std::span<const double> piece_scale) {
    ZT_CHECK(o.stages >= 1 && o.micro_batches >= 1 && o.virtual_stages >= 1,
             "pipeline simulator: stages (", o.stages, "), micro-batches (", o.micro_batches,
             ") and virtual stages (", o.virtual_stages, ") must be >= 1");
    ZT_CHECK(t_f >= 0 && t_b >= 0 && t_w >= 0, "pipeline simulator: op costs must be >= 0 (t_f ",
             t_f, ", t_b ", t_b, ", t_w ", t_w, ")");
    ZT_CHECK(piece_scale.empty() ||
                 piece_scale.size() == static_cast<size_t>(o.stages) * o.virtual_stages,
             "pipeline simulator: ", piece_scale.size(), " piece costs for ",
             o.stages * o.virtual_stages, " pieces");
    for (double x : piece_scale)
        ZT_CHECK(x >= 0, "pipeline simulator: piece costs must be >= 0 (got ", x, ")");
    check_complete(o, ops);
    return PipeRun(o, ops).run(t_f, t_b, t_w, piece_scale);
}

}  // namespace zt
