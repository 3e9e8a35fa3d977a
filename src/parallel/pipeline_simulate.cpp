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

// Note [Compiled simulation]
// The simulator looks at an op's inputs every time its stage is woken; the order does not change
// between the runs of a search, so each op's inputs are resolved once into slots of one flat
// array of end times, and a run is a loop over those indices. The arithmetic (an op starts at
// the max of its stage's free time and its inputs' ends, in that order; its cost is its kind's
// cost times its piece's scale) is the same, so every run gives the bits of a fresh simulation.
PipeSimulator::PipeSimulator(const PipeOptions& o, std::vector<std::vector<PipeOp>> ops)
    : o_(o), ops_(std::move(ops)) {
    ZT_CHECK(o.stages >= 1 && o.micro_batches >= 1 && o.virtual_stages >= 1,
             "pipeline simulator: stages (", o.stages, "), micro-batches (", o.micro_batches,
             ") and virtual stages (", o.virtual_stages, ") must be >= 1");
    check_complete(o_, ops_);
    const int p = o_.stages, vstages = o_.stages * o_.virtual_stages, m = o_.micro_batches;
    const auto slot = [&](PipeOpKind k, int vstage, int micro) {
        return (static_cast<int>(k) * vstages + vstage) * m + micro;
    };
    steps_.resize(ops_.size());
    for (size_t st = 0; st < ops_.size(); ++st) {
        for (const PipeOp& op : ops_[st]) {
            const int v = op.chunk * p + static_cast<int>(st);
            Step x{static_cast<int>(op.kind), v, slot(op.kind, v, op.micro), 0, -1, {0, 0}};
            switch (op.kind) {
                case PipeOpKind::kForward:  // the previous virtual stage's forward
                    if (v > 0) x.in[x.n_in++] = slot(PipeOpKind::kForward, v - 1, op.micro);
                    if (v + 1 < vstages) x.wake = (v + 1) % p;
                    break;
                case PipeOpKind::kBackward:  // its own forward and the next stage's backward
                    x.in[x.n_in++] = slot(PipeOpKind::kForward, v, op.micro);
                    if (v + 1 < vstages)
                        x.in[x.n_in++] = slot(PipeOpKind::kBackward, v + 1, op.micro);
                    if (v > 0) x.wake = (v - 1) % p;
                    break;
                case PipeOpKind::kWeightGrad:  // its own B, on its own stage
                    x.in[x.n_in++] = slot(PipeOpKind::kBackward, v, op.micro);
                    break;
            }
            steps_[st].push_back(x);
        }
        total_ += ops_[st].size();
    }
    for (const auto& list : ops_) {
        int alive = 0, peak = 0, pending = 0, peak_pending = 0;
        for (const PipeOp& op : list) {
            if (op.kind == PipeOpKind::kForward) peak = std::max(peak, ++alive);
            if (op.kind == PipeOpKind::kBackward) --alive;
            if (op.kind == PipeOpKind::kBackward && o_.schedule == PipeSchedule::kZeroBubble)
                peak_pending = std::max(peak_pending, ++pending);
            if (op.kind == PipeOpKind::kWeightGrad) --pending;
        }
        peak_in_flight_.push_back(peak);
        peak_pending_w_.push_back(peak_pending);
    }
    done_.resize(static_cast<size_t>(kKinds) * vstages * m);
    stage_free_.resize(static_cast<size_t>(p));
    busy_.resize(static_cast<size_t>(p));
    next_.resize(static_cast<size_t>(p));
    queued_.resize(static_cast<size_t>(p));
    work_.reserve(static_cast<size_t>(p));
}

void PipeSimulator::execute(double t_f, double t_b, double t_w, std::span<const double> scale) {
    ZT_CHECK(t_f >= 0 && t_b >= 0 && t_w >= 0, "pipeline simulator: op costs must be >= 0 (t_f ",
             t_f, ", t_b ", t_b, ", t_w ", t_w, ")");
    ZT_CHECK(scale.empty() || scale.size() == static_cast<size_t>(o_.stages) * o_.virtual_stages,
             "pipeline simulator: ", scale.size(), " piece costs for ",
             o_.stages * o_.virtual_stages, " pieces");
    for (double x : scale)
        ZT_CHECK(x >= 0, "pipeline simulator: piece costs must be >= 0 (got ", x, ")");
    const bool split = o_.schedule == PipeSchedule::kZeroBubble;
    const double cost[kKinds] = {t_f, split ? t_b : t_b + t_w, t_w};
    const int p = o_.stages;
    std::fill(done_.begin(), done_.end(), -1.0);
    std::fill(stage_free_.begin(), stage_free_.end(), 0.0);
    std::fill(busy_.begin(), busy_.end(), 0.0);
    std::fill(next_.begin(), next_.end(), size_t{0});
    std::fill(queued_.begin(), queued_.end(), char{1});
    left_ = total_;
    // Note [Simulation by worklist]
    // A stage runs its list until an op finds an input missing; an op done can unblock only the
    // stages that consume it (a forward: the next virtual stage's owner and its own backward's
    // stage; a backward: the previous virtual stage's owner and its own weight-grad), so only
    // those are looked at again, instead of every stage in sweeps. Each op's times depend only
    // on its stage's previous op and its inputs' end times, so the order stages are run in does
    // not change the timeline: the sweeps gave the same bits at O(stages) checks per op.
    work_.clear();
    for (int s = p - 1; s >= 0; --s) work_.push_back(s);
    double* done = done_.data();
    while (left_ > 0 && !work_.empty()) {
        const int s = work_.back();
        work_.pop_back();
        queued_[static_cast<size_t>(s)] = 0;
        const std::vector<Step>& list = steps_[static_cast<size_t>(s)];
        size_t i = next_[static_cast<size_t>(s)];
        double free = stage_free_[static_cast<size_t>(s)], busy = busy_[static_cast<size_t>(s)];
        // Run stage s's list until an op finds an input missing.
        for (; i < list.size(); ++i) {
            const Step& x = list[i];
            // The op starts once its stage is free and the last of its inputs is done.
            double start = free;
            bool ready = true;
            for (int k = 0; k < x.n_in; ++k) {
                const double d = done[x.in[k]];
                if (d < 0) ready = false;
                start = std::max(start, d);
            }
            if (!ready) break;
            const double c =
                cost[x.kind] * (scale.empty() ? 1.0 : scale[static_cast<size_t>(x.vstage)]);
            free = done[x.slot] = start + c;
            busy += c;
            --left_;
            if (x.wake >= 0 && !queued_[static_cast<size_t>(x.wake)]) {
                queued_[static_cast<size_t>(x.wake)] = 1;
                work_.push_back(x.wake);
            }
        }
        next_[static_cast<size_t>(s)] = i;
        stage_free_[static_cast<size_t>(s)] = free;
        busy_[static_cast<size_t>(s)] = busy;
    }
    if (left_ > 0) fail_deadlock();
}

PipeTimeline PipeSimulator::run(double t_f, double t_b, double t_w,
                                std::span<const double> piece_scale) {
    execute(t_f, t_b, t_w, piece_scale);
    PipeTimeline t;
    t.busy = busy_;
    t.makespan = *std::max_element(stage_free_.begin(), stage_free_.end());
    double busy = 0;
    for (double b : t.busy) busy += b;
    t.bubble = busy > 0 ? (o_.stages * t.makespan - busy) / busy : 0.0;
    t.peak_in_flight = peak_in_flight_;
    t.peak_pending_w = peak_pending_w_;
    return t;
}

double PipeSimulator::makespan(double t_f, double t_b, double t_w,
                               std::span<const double> piece_scale) {
    execute(t_f, t_b, t_w, piece_scale);
    return *std::max_element(stage_free_.begin(), stage_free_.end());
}

std::string PipeSimulator::describe(const PipeOp& op) const {
    std::string s = str_cat(pipe_op_kind_name(op.kind), " of micro-batch ", op.micro);
    if (o_.virtual_stages > 1) s += str_cat(" on chunk ", op.chunk);
    return s;
}

// Names each stuck stage, the op it is blocked at and what that op waits for.
void PipeSimulator::fail_deadlock() const {
    const int p = o_.stages, vstages = p * o_.virtual_stages, m = o_.micro_batches;
    std::string why;
    for (int s = 0; s < p; ++s) {
        const size_t at = next_[static_cast<size_t>(s)];
        if (at >= ops_[s].size()) continue;
        const PipeOp& op = ops_[s][at];
        const Step& x = steps_[s][at];
        int need = -1;
        for (int k = 0; k < x.n_in && need < 0; ++k)
            if (done_[static_cast<size_t>(x.in[k])] < 0) need = x.in[k];
        ZT_ASSERT(need >= 0, "pipeline simulator: stage ", s, " stopped with its inputs done");
        const auto kind = static_cast<PipeOpKind>(need / (vstages * m));
        const int vstage = need / m % vstages, from = vstage % p;
        const PipeOp need_op{kind, need % m, vstage / p};
        std::string w = str_cat("stage ", s, " is blocked at ", describe(op), " (op ", at + 1,
                                " of ", ops_[s].size(), "): it waits for ");
        if (from == s && need_op.chunk == op.chunk) {
            w += str_cat("its own ", describe(need_op), ", which comes later in its list");
        } else {
            w += str_cat(kind == PipeOpKind::kForward ? "the activations" : "the gradient",
                         " of micro-batch ", need_op.micro);
            w += o_.virtual_stages > 1 ? str_cat(" from chunk ", need_op.chunk, " of stage ", from)
                                       : str_cat(" from stage ", from);
            const size_t fa = next_[static_cast<size_t>(from)];
            if (fa < ops_[from].size())
                w += str_cat(", which is blocked at ", describe(ops_[from][fa]));
        }
        why += (why.empty() ? "" : "; ") + w;
    }
    ZT_FAIL("pipeline order deadlocks with ", left_, " of ", total_, " ops left: ", why);
}

void check_pipe_order(const PipeOptions& o, const std::vector<std::vector<PipeOp>>& ops) {
    simulate_pipe(o, ops, 1.0, 1.0, 1.0);
}

PipeTimeline simulate_pipe(const PipeOptions& o, const std::vector<std::vector<PipeOp>>& ops,
                           double t_f, double t_b, double t_w,
                           std::span<const double> piece_scale) {
    return PipeSimulator(o, ops).run(t_f, t_b, t_w, piece_scale);
}

}  // namespace zt
