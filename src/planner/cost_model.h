// The planner's cost model (docs/planner.md): for a model family and one layout (a Strategy),
// the per-rank memory by category and the step time split into parts, from a calibration
// profile (profile.h). Pure functions: no I/O, no clock. Memory comes from estimate.h /
// state_bytes.h (exact for model state); activations are the family's per-policy figures scaled
// for the pipeline's micro-batches in flight; time is work over measured rates, with Note
// [Step time model] in cost_model.cpp saying which work goes over which rate.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "parallel/pipeline_schedule.h"
#include "planner/estimate.h"
#include "planner/profile.h"
#include "planner/sparse_times.h"

namespace zt {

// One layout of a run over dp x tp x pp ranks.
struct Strategy {
    int dp = 1, tp = 1, pp = 1;
    int zero_stage = 0;
    PipeSchedule schedule = PipeSchedule::kOneFOneB;  // pp > 1
    int virtual_stages = 1;                           // interleaved: >= 2
    int64_t micro_batch = 1;                          // per rank
    int64_t grad_accum = 1;           // micro-batches per step (the pipeline's micro_batches)
    std::string checkpoint = "none";  // activation_checkpointing.policy
    // checkpoint "blocks": each block's choice (activation_checkpointing.blocks), as the
    // per-layer search chose it (planner/layer_search.h).
    std::vector<BlockRecompute> blocks;
    std::string offload = "none";    // zero_optimization.offload_optimizer.device
    bool sequence_parallel = false;  // parallel.sequence_parallel (tp > 1)
    // pp > 1 on ranks of unequal speed: block counts per stage (parallel.pipeline.partition,
    // planner/hetero.h); empty: the engine's balanced partition.
    std::vector<int64_t> partition;
    // dp > 1 on ranks of unequal speed, no pipeline: samples per micro-batch of each dp rank
    // (parallel.batch_shares, summing to micro_batch x dp); empty: micro_batch each.
    std::vector<int64_t> batch_shares;
    // dp > 1 on ranks of unequal memory, tables placed whole on ranks: embedding.rank_weights,
    // each dp rank's share of the table-wise tables (the ranks' budgets in MiB); empty: the
    // config's own placement.
    std::vector<double> table_weights;
    bool operator==(const Strategy&) const = default;
};

// "dp 2 x tp 1 x pp 1, ZeRO-1, micro 4 x 2, checkpoint none" (+ ", 1f1b", ", offload cpu",
// ", sp", ", stages 5+3", ", shares 5+3", ", tables by 2048+1024"); per-block checkpointing:
// "checkpoint blocks (full 0-2, none 3-7)".
std::string strategy_label(const Strategy& s);
nlohmann::json strategy_json(const Strategy& s);

// What a pipeline layout's cost needs from the schedule and the partition, for p stages, m
// micro-batches, v virtual stages and a schedule: the balanced partition's block counts, the
// micro-batches in flight per stage (simulated), the most loaded rank's share of the costs and
// the schedule's idle time on that rank.
struct PipeFacts {
    std::vector<int64_t> counts;
    std::vector<int> peak_in_flight;
    std::vector<int> peak_pending_w;  // zero bubble: B done, W not yet (pipeline_schedule.h)
    double share = 1.0;
    // The schedule's span over the busiest rank's compute, minus 1, simulated with each piece's
    // ops scaled by its cost (Note [Bubble of uneven pieces]); pipe_bubble_formula at equal pieces.
    double idle = 0.0;
};

// Memo of PipeFacts per (family, p, m, v, schedule): simulating a schedule of many
// micro-batches is the costliest part of costing a layout, and a search asks for the same ones
// again and again. Thread-safe.
class PipeCache {
  public:
    const PipeFacts& facts(const ModelFamily& m, const PipeOptions& o);

  private:
    std::mutex mu_;
    std::map<std::tuple<const ModelFamily*, int, int, int, int>, PipeFacts> memo_;
};

// What does not change between layouts: the config's model, precision, optimizer and buffer
// sizes (as `zerotrain estimate` sees them at one rank), the step's global batch and the hosts.
struct PlanBase {
    EstimateSpec spec;         // micro_batch, tp, pp, ranks, stage and offload are the layout's
    int64_t global_batch = 1;  // train_batch_size: micro x accumulation x dp
    int cores = 1;             // cores per host
    int ranks_per_host = 0;    // 0: every rank on one host
    int threads = 0;           // intra-op threads per rank; 0: cores / ranks on the host
    std::string backend = "local";  // whose collective fits to use ("local" or "mpi")
    int64_t param_tensors = 0;      // the model's parameter tensors (ops per micro-batch: 3 each)
    std::shared_ptr<PipeCache> pipe_cache = std::make_shared<PipeCache>();  // shared by copies
    // zero_optimization.overlap_comm: 1 on, 0 off, -1 the engine's default (on at stage 3 only).
    // Gradient buckets are then reduced while backward runs (Note [Overlapped communication]).
    int overlap_comm = -1;
    // Relative speed per rank (--rank-speed, planner/hetero.h); empty: equal ranks.
    std::vector<double> rank_speed;
    // Device budget per rank in bytes (--rank-memory, with --memory-budget's bound folded in);
    // empty: the search's one budget. Pipeline stages are then sized to what each holds.
    std::vector<int64_t> rank_memory;
};

// Whether a layout reduces its gradient buckets during backward (base.overlap_comm resolved).
bool overlaps_comm(const PlanBase& base, const Strategy& s);

// Exposed seconds of `comm` seconds of communication issued as `pieces` equal pieces evenly
// through `compute` seconds of computation, on one communicator that runs a piece at a time:
// reductions of buckets backward fills (piece i ready at i/pieces of it), or, mirrored, gathers
// prefetched ahead of the modules that use them. max(comm / k, comm - compute (k - 1) / k);
// pieces <= 1: all of comm (Note [Overlapped communication]).
double exposed_behind(double comm, double compute, double pieces);

// Seconds of the sharded tables' exchanges in one step over `ranks` data-parallel ranks of
// `micro_steps` micro-batches, each exchanging `x` (nullopt or one rank: 0). Note [Sparse
// exchange time].
double sparse_exchange_seconds(const CommProfile& cp, int ranks, double micro_steps,
                               const std::optional<SparseExchange>& x);

// Seconds of one optimizer step on the slowest rank, by part. dp_comm, tp_comm and pp_comm are
// each communication's whole time; the *_overlapped parts of them run behind compute (Note
// [Overlapped communication] in cost_model.cpp) and only the exposed rest adds to the step.
struct StepTime {
    double compute = 0;        // forward + backward: GEMMs, attention, elementwise
    double recompute = 0;      // activation checkpointing's second forward
    double optimizer = 0;      // the update over this rank's range
    double dp_comm = 0;        // gradient reduction and weight gathers over dp (ZeRO)
    double tp_comm = 0;        // tensor-parallel all-reduces of activations
    double pp_comm = 0;        // pipeline sends of activations and their gradients
    double emb_comm = 0;       // sharded tables' all-to-alls over dp (blocking: all exposed)
    double bubble = 0;         // pipeline idle time
    double offload_io = 0;     // optimizer offload: host copies or NVMe reads and writes
    double dp_overlapped = 0;  // of dp_comm: bucket reductions and prefetched gathers hidden
    double pp_overlapped = 0;  // of pp_comm: nonblocking sends off the critical path
    double comm_overlapped() const { return dp_overlapped + pp_overlapped; }
    double comm_all() const { return dp_comm + tp_comm + pp_comm + emb_comm; }
    double comm_exposed() const { return comm_all() - comm_overlapped(); }
    double total() const {
        return compute + recompute + optimizer + comm_exposed() + bubble + offload_io;
    }
};

struct PlanCost {
    Strategy strategy;
    Estimate memory;           // device / host / nvme bytes by category, activations scaled
    int64_t device_bytes = 0;  // plan_peak_bytes(memory): the per-rank figure the budget bounds
    bool timed = false;        // a profile was given
    StepTime time;
    // With PlanBase::rank_memory: each pipeline stage's device peak (one entry without a
    // pipeline), checked against the stage's smallest rank budget.
    std::vector<int64_t> stage_bytes;
};

// The schedule options of a pipeline layout (p stages, its micro-batches, v, the schedule).
PipeOptions pipe_options(const Strategy& s);
// The pieces' block counts: the layout's own (ranks of unequal speed) or the balanced partition.
const std::vector<int64_t>& pipe_counts(const PlanBase& b, const Strategy& s);

// Memory of a layout (no profile needed). Throws zt::Error (kInput) when the family cannot
// split as asked (tp not dividing its heads, more stages than blocks).
Estimate plan_memory(const PlanBase& base, const Strategy& s);
// One pipeline stage's memory (0 <= stage < s.pp): its parameters, buckets and micro-batches in
// flight, not the most loaded stage's. Without a pipeline, plan_memory's.
Estimate plan_memory_of_stage(const PlanBase& base, const Strategy& s, int stage);

// The device peak of a layout's memory: the categories' sum, less the comm buffers that never
// live beside the activations (Note [Peak of stages 0 and 1] in cost_model.cpp).
int64_t plan_peak_bytes(const Estimate& e);
// The bytes other data moves through the host's caches between a step's two uses of one
// weight (Note [Products timed cold], shape_times.cpp): the rank's device and host bytes (an
// offloaded optimizer state streams through the same caches on a CPU) less its embedding
// tables (a step touches few of their rows), times the ranks sharing the host.
double step_bytes_between_uses(const Estimate& e, int ranks_on_host);

// How many of the layout's ranks share one host (PlanBase::ranks_per_host; 0 there: all).
int ranks_on_host(const PlanBase& b, const Strategy& s);
// The intra-op threads of one of the layout's ranks (PlanBase::threads, else the host's cores
// over its ranks on the host).
int threads_per_rank(const PlanBase& b, const Strategy& s);

// The most samples a rank of the layout takes a micro-step (its largest batch share).
int64_t largest_micro_batch(const Strategy& s);

// The activations of one micro-batch under the layout's policy (per-block lists included), on
// one rank of its tensor-parallel group, for the whole model.
PolicyActivations layout_activations(const PlanBase& base, const Strategy& s);
// Each block's saved bytes of one micro-batch (the layout's largest, t and sp) beyond being
// recomputed whole, per choice in kBlockRecomputes order (ModelFamily::block_memory, or each
// block changed alone in ModelFamily::block_activations).
std::vector<std::array<double, 3>> block_extra_bytes(const PlanBase& base, const Strategy& s);

// The blocks pipeline stage k of the layout holds (all of them without a pipeline).
std::vector<int64_t> stage_blocks(const PlanBase& base, const Strategy& s, int k);
// What the layout's policy recomputes per sample: one entry per pipeline stage (its own blocks)
// where the policy is chosen block by block, else one entry for the whole model.
std::vector<RecomputeFlops> stage_recompute_flops(const PlanBase& base, const Strategy& s);

// FLOP/s of the layout's products and of its attention core on one of its ranks, as its step
// time takes them (the profile's rates at the rank's threads, shared with the host's other ranks).
struct ComputeRates {
    double gemm = 0, attention = 0;
};
ComputeRates compute_rates(const PlanBase& base, const Strategy& s, const MachineProfile& profile);

// Memory and, with a profile, step time.
PlanCost plan_cost(const PlanBase& base, const Strategy& s, const MachineProfile* profile);

// The largest device category of an estimate: its name and bytes.
std::pair<std::string, int64_t> largest_category(const Estimate& e);
// The same over any per-category bytes (the host's, the nvme tier's).
std::pair<std::string, int64_t> largest_category(const CategoryBytes& bytes);

nlohmann::json step_time_json(const StepTime& t);
nlohmann::json plan_cost_json(const PlanCost& c);

}  // namespace zt
