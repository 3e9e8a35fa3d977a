// Pipeline-parallel schedules as pure functions: for p stages (pipeline ranks) and m micro-batches,
// the ordered list of forward / backward / weight-gradient ops each stage runs, and a simulator
// that executes those lists against their data dependencies to give the makespan, the bubble and
// the activation memory each stage holds. Invariant: every stage's list holds exactly one forward
// and one backward (and, in zero bubble, one W) per (micro-batch, chunk). No communication, no I/O.
// See Note [Pipeline schedules] in pipeline_schedule.cpp for how each order is built.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

// The config names of `parallel.pipeline.schedule`: "gpipe", "1f1b", "interleaved", "zero_bubble".
enum class PipeSchedule { kGpipe, kOneFOneB, kInterleaved, kZeroBubble };
const char* pipe_schedule_name(PipeSchedule s);
// Throws zt::Error (kInput) naming parallel.pipeline.schedule and the valid names.
PipeSchedule parse_pipe_schedule(std::string_view name);

enum class PipeOpKind {
    kForward,
    kBackward,    // the whole backward; in zero bubble only its input-gradient part (B)
    kWeightGrad,  // the weight-gradient part (W) of a backward split in two: zero bubble only
};
const char* pipe_op_kind_name(PipeOpKind k);  // "forward", "backward", "weight-grad"

struct PipeOp {
    PipeOpKind kind = PipeOpKind::kForward;
    int micro = 0;  // micro-batch index in [0, m)
    int chunk = 0;  // model chunk on this rank in [0, v): 0 unless interleaved
    bool operator==(const PipeOp&) const = default;
};

// p = stages, m = micro_batches, v = virtual_stages. With v chunks per rank (interleaved only),
// chunk c of rank s is virtual stage c * p + s of the p * v that make up the model.
struct PipeOptions {
    int stages = 1;
    int micro_batches = 1;
    int virtual_stages = 1;
    PipeSchedule schedule = PipeSchedule::kOneFOneB;
};

// Checks options against a model of `blocks` transformer blocks (or layers) before any work;
// throws zt::Error (kInput) naming the parallel.pipeline key, the value and the fix when
//   - stages < 1, micro_batches < 1 or virtual_stages < 1;
//   - virtual_stages != 1 and the schedule is not interleaved, or interleaved with v < 2 (the
//     interleaved order with one chunk is not 1F1B: use 1f1b);
//   - p * v > blocks (each virtual stage needs at least one block);
//   - interleaved and blocks is not a multiple of p * v (each rank's blocks split evenly into v
//     chunks, as in Megatron-LM);
//   - interleaved and m is not a multiple of p (Megatron-LM's rule: micro-batches run in groups
//     of p per chunk, so m % p == 0, hence m >= p). gpipe, 1f1b and zero_bubble take any m >= 1.
void validate_pipe(const PipeOptions& o, int64_t blocks);

// For each stage s in [0, p), the ops it runs, in order. Throws zt::Error (kInput) for options
// validate_pipe rejects whatever the block count.
std::vector<std::vector<PipeOp>> pipe_schedule(const PipeOptions& o);

// Checks that `ops` (one list per stage) is a complete order that can run: each stage holds one
// forward and one backward per (micro, chunk) (plus one W in zero bubble, none otherwise), and
// executing each stage's list in order never deadlocks. Throws zt::Error (kInput) otherwise,
// naming each stuck stage, the op it is blocked at and what that op waits for, e.g.
// "stage 1 is blocked at forward of micro-batch 3: it waits for the activations of micro-batch 3
// from stage 0, which is blocked at backward of micro-batch 1".
void check_pipe_order(const PipeOptions& o, const std::vector<std::vector<PipeOp>>& ops);

// The result of executing per-stage op lists with zero communication time.
//   busy[s]      time stage s computes;
//   makespan     time the last op ends (every stage starts at 0);
//   bubble       idle time over compute time: (p * makespan - sum busy) / sum busy. This is the
//                definition behind the textbook (p - 1) / m of 1F1B (bubble (p-1)(t_f+t_b)
//                over ideal m (t_f+t_b)), so it is comparable with pipe_bubble_formula; the
//                idle share of the timeline is bubble / (1 + bubble);
//   peak_in_flight[s]  the most (micro, chunk) pairs whose activations are alive on stage s at
//                once (forward done, backward / B not yet done). Interleaved counts chunks, each
//                1/v of the stage's layers.
//   peak_pending_w[s]  the most (micro, chunk) pairs on stage s whose B is done and whose W is
//                not (zero bubble only; 0 otherwise). Their tapes stay alive until W, holding
//                every tensor the backward kept, recomputed ones included.
struct PipeTimeline {
    std::vector<double> busy;
    double makespan = 0;
    double bubble = 0;
    std::vector<int> peak_in_flight;
    std::vector<int> peak_pending_w;
};

// Runs each stage's list in order; an op starts when its stage is free and its inputs are done:
//   forward at virtual stage k needs forward at k - 1 (same micro);
//   backward at k needs its own forward and backward at k + 1 (the last virtual stage only its
//   forward); W needs its own B.
// Costs are per op and chunk: t_f forward, t_b backward (B), t_w weight gradient; outside zero
// bubble a backward costs t_b + t_w. Uneven pieces: piece_scale[k] (k = chunk * p + stage, the
// partition's piece order; p v entries) multiplies the costs of piece k's ops (empty: all 1).
// Throws as check_pipe_order does on an order that is incomplete or deadlocks.
PipeTimeline simulate_pipe(const PipeOptions& o, const std::vector<std::vector<PipeOp>>& ops,
                           double t_f, double t_b, double t_w,
                           std::span<const double> piece_scale = {});

// simulate_pipe for one order run many times at different costs (the interleaved partition's
// search simulates one order thousands of times): the order is checked once and compiled into
// flat dependency indices; each run gives exactly simulate_pipe's result, bit for bit.
class PipeSimulator {
  public:
    // Throws as check_pipe_order does on an incomplete order (a deadlock is found by run).
    PipeSimulator(const PipeOptions& o, std::vector<std::vector<PipeOp>> ops);
    PipeTimeline run(double t_f, double t_b, double t_w, std::span<const double> piece_scale = {});
    // run's makespan alone (no timeline built).
    double makespan(double t_f, double t_b, double t_w, std::span<const double> piece_scale = {});

  private:
    // An op compiled: its kind, virtual stage, the slot its end time goes to, its inputs' slots
    // (slot = (kind * p v + vstage) * m + micro) and the stage its result may unblock (-1: none).
    struct Step {
        int kind, vstage, slot, n_in, wake;
        int in[2];
    };
    void execute(double t_f, double t_b, double t_w, std::span<const double> piece_scale);
    [[noreturn]] void fail_deadlock() const;
    std::string describe(const PipeOp& op) const;

    PipeOptions o_;
    std::vector<std::vector<PipeOp>> ops_;
    std::vector<std::vector<Step>> steps_;
    std::vector<int> peak_in_flight_, peak_pending_w_;
    size_t total_ = 0;
    // Per run: slot end times (-1 not run yet), each stage's next op and free time, the work list.
    std::vector<double> done_, stage_free_, busy_;
    std::vector<size_t> next_;
    std::vector<int> work_;
    std::vector<char> queued_;
    size_t left_ = 0;
};

// The bubble (as in PipeTimeline) each schedule is known for, with zero communication time:
//   gpipe, 1f1b:  (p - 1) / m;
//   interleaved:  (p - 1) / (v m);
//   zero_bubble:  ZB-H1's bubble time (p - 1)(t_f + t_b - t_w) (Qi et al. 2023, section 3.1)
//                 over the ideal m (t_f + t_b + t_w), taken at equal costs: (p - 1) / (3 m),
//                 a third of 1F1B's. The simulator reaches it for m >= p; with fewer
//                 micro-batches there is no steady state for W to fill and the bubble is larger.
double pipe_bubble_formula(const PipeOptions& o);

}  // namespace zt
