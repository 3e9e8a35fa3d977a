#include "planner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "parallel/pipeline_partition.h"
#include "planner/calibrate.h"
#include "planner/hetero.h"
#include "planner/shape_times.h"
#include "planner/sparse_times.h"
#include "tensor/gemm_select.h"
#include "util/error.h"
#include "util/units.h"

namespace zt {

// Note [Step time model]
// Per rank and optimizer step, with b = micro-batch, m = micro-batches (accumulation), and the
// rates of the profile at the rank's intra-op threads (profile.h, at_threads):
//   compute    = (GEMM FLOPs / GEMM rate + attention FLOPs / attention rate + elementwise bytes /
//                elementwise bandwidth) x m, each split over tp and, for the most loaded pipeline
//                stage, its share of the family's pipeline costs. GEMM FLOPs are the family's
//                flops_per_sample less the attention core (GPT: 12 L T C per token, Note
//                [Counting FLOPs]); the GEMM rate is the engine's chosen library's for the run's
//                dtype and the size class of the model's typical product (b T x C x C / tp).
//                Elementwise bytes: 4 x the activations one micro-batch saves with no
//                checkpointing (written in forward, read, and their gradients written and read
//                in backward), the rank's own under tp (not split again: Note [Elementwise
//                bytes of a tensor-parallel rank]); plus the fixed cost of the micro-batch's ops: 3
//                per parameter tensor (forward product, two backward), each the profile's
//                op_overhead_s; and at more than one thread, as many OpenMP region starts or the
//                passes at one thread's bandwidth (Note [Team wakes]).
//   recompute  = the FLOPs the checkpointing policy runs again (ModelFamily::recompute_flops;
//                GPT: the checkpointed blocks' forward less each block's down projection,
//                "selective" the attention core's forward) at the GEMM and attention rates.
//   optimizer  = (3 + 2 s) x 4 bytes per element of the rank's update range over the elementwise
//                bandwidth (read the weight, gradient and s states, write weight and states).
//   dp_comm    = the collectives of the ZeRO stage (docs/parallel.md): stage 0 all-reduces the
//                gradients once, 1 reduce-scatters them once and all-gathers the weights, 2
//                reduce-scatters at every micro-step, 3 also all-gathers the weights before each
//                micro-step's forward and backward; each as latency x buckets + bus bytes over
//                the fitted bus bandwidth.
//   tp_comm    = 4 all-reduces of one micro-batch's (b, T, C) activations per block per
//                micro-step (two in forward, two in backward, as Megatron-LM's split does).
//   pp_comm    = 2 messages of (b, T, C) / tp per micro-batch and chunk on the rank (v with the
//                interleaved schedule): activations forward, gradients back.
//   emb_comm   = the sharded tables' exchanges over dp ranks (Note [Sparse exchange time]).
//   bubble     = the stage's compute x the schedule's simulated idle time over it (Note [Bubble
//                of uneven pieces]; pipe_bubble_formula at equal pieces); on cores shared by
//                more rank threads than they hold, only what one rank's full-speed path adds
//                past the host's work over its cores (Note [Bubble on shared cores]).
//   offload_io = cpu: the gradients down and weights back as copies over the elementwise
//                bandwidth; nvme: the master weights and states read and written per step at
//                the disk's measured rate of reads and writes at once, less the update that
//                runs behind it.
// Ranks of one host share its cores and memory bus: a rank's rates are those at its threads,
// slowed by ranks x threads / cores when that passes 1, and its bandwidth at most the host's
// measured one over its ranks. What of the communication hides behind compute: Note
// [Overlapped communication].

// Note [Overlapped communication]
// A communicator runs its transfers one at a time in issue order (comm/communicator.h), beside
// the rank's compute. Communication issued as k equal pieces c/k evenly through a computation of
// w seconds (bucket i of the gradients ready at i w / k) finishes at max(w + c/k, w/k + c): the
// last piece cannot start before the computation ends, and when the communicator is the slower,
// it starts at the first piece and runs c without a gap. The exposed part is that finish less w:
// max(c/k, c - w (k - 1)/k) (exposed_behind). Gathers prefetched ahead of the modules that use
// them are the mirror image (the first piece waits, the rest hides). Per ZeRO stage
// (parallel/zero_stage.cpp, Note [ZeRO data flow]):
// - with overlap_comm (zero_optimization.overlap_comm; the engine's default: stage 3 only) the
//   buckets (k = ceil(P / reduce_bucket_size)) are reduced during the backward of the last
//   micro-step (stages 0, 1) or of every micro-step (2, 3), w = the backward (2/3 of a
//   micro-step's compute, plus its recompute); without it they are reduced after it, all exposed.
//   One bucket (DeepSpeed's default of 5e8 elements for a model smaller than that) hides nothing.
// - stage 3's weight gathers, one per module (k = the blocks), hide behind the forward's and the
//   backward's compute when stage3_prefetch_bucket_size > 0; its reductions share the
//   communicator with the backward's gathers, so their window is the backward less the gathers'
//   hidden time.
// - the weights' all-gather after the update (stages 1, 2) waits: nothing runs beside it.
// - tensor-parallel all-reduces are blocking inside the forward and backward: all exposed.
// - pipeline sends are nonblocking (runtime/pipeline_runner.cpp): a stage sends and goes on
//   with its next micro-batch, so a transfer waits only on the step's critical path, the first
//   micro-batch's forward through the v p - 1 hops and the last one's backward back: 2 (v p - 1)
//   transfers exposed per step, the others overlapped.
// Measured: comm_s in metrics.jsonl is the exposed time, "comm_overlap" the busy and hidden
// parts; `plan --check` sets them beside the prediction (docs/benchmarks-planner.md).

// Note [Sparse exchange time]
// Sharded tables exchange, per micro-batch on each rank (embedding/embedding_exchange.cpp): the
// request counts (one int64 per rank), the distinct ids to their owners (8 bytes each), the rows
// back (their floats) and in backward the rows' gradients to their owners, four all-to-alls,
// each waited for; per step two small all-gathers (the tables' figures and the gradient norm's
// sum). Each rank sends (n - 1) / n of its payload, as an all-gather of it does, so each costs
// the local backend's all-gather fit (latency + (n - 1) / n x bytes over its bus rate). The
// payload is the shape's measured mean (planner/sparse_times.h). Not modelled: the embedding
// codecs of comm_precision (the floats are counted as fp32) and staleness, whose backward
// exchange runs behind the next step. Measured on the DLRM example row-sharded over 2 ranks:
// 4 all-to-alls and 3 all-gathers a step, ~0.8 ms of a 2 ms step (docs/benchmarks-planner.md).
double sparse_exchange_seconds(const CommProfile& cp, int ranks, double micro_steps,
                               const std::optional<SparseExchange>& x) {
    if (ranks <= 1 || !x) return 0;
    const double f = shard_bus_factor(ranks);
    const CollectiveFit& a2a = cp.all_gather;
    const double per_micro = a2a.time_s(8.0 * ranks, f) + a2a.time_s(8.0 * x->ids, f) +
                             2 * a2a.time_s(4.0 * x->floats, f);
    return micro_steps * per_micro + 2 * a2a.time_s(0, f);  // the two small gathers
}

bool overlaps_comm(const PlanBase& base, const Strategy& s) {
    return base.overlap_comm < 0 ? s.zero_stage == 3 : base.overlap_comm == 1;
}

double exposed_behind(double comm, double compute, double pieces) {
    if (pieces <= 1 || comm <= 0) return std::max(0.0, comm);
    return std::max(comm / pieces, comm - std::max(0.0, compute) * (pieces - 1) / pieces);
}

PipeOptions pipe_options(const Strategy& s) {
    return {s.pp, static_cast<int>(s.grad_accum), s.virtual_stages, s.schedule};
}

const std::vector<int64_t>& pipe_counts(const PlanBase& b, const Strategy& s) {
    if (!s.partition.empty()) return s.partition;
    return b.pipe_cache->facts(*b.spec.model, pipe_options(s)).counts;
}

namespace {

// The model's shape as the time model needs it (GPT: from describe_json; other families: zeros,
// so attention and tensor-parallel traffic drop out).
struct ModelShape {
    double L = 0, T = 0, C = 0;
};

ModelShape shape_of(const ModelFamily& m) {
    const nlohmann::json j = m.describe_json();
    ModelShape s;
    if (j.contains("n_layers") && j.contains("seq_len") && j.contains("d_model")) {
        s.L = j["n_layers"].get<double>();
        s.T = j["seq_len"].get<double>();
        s.C = j["d_model"].get<double>();
    }
    return s;
}

// The slowest pipeline rank's share of the model's costs at speed 1 (1 without a pipeline):
// the most loaded stage's, or on ranks of unequal speed the largest cost over speed
// (planner/hetero.h; without a pipeline, the slowest rank's 1 / speed).
double stage_share(const PlanBase& b, const Strategy& s) {
    const bool speeds =
        !b.rank_speed.empty() && static_cast<int>(b.rank_speed.size()) == s.dp * s.tp * s.pp;
    if (!s.batch_shares.empty() && s.pp <= 1) {
        // Unequal batch shares: the rank with the most work for its speed.
        const std::vector<double> v = speeds ? dp_speeds(b.rank_speed, s.dp, s.tp)
                                             : std::vector<double>(s.batch_shares.size(), 1.0);
        double most = 0;
        for (size_t r = 0; r < s.batch_shares.size(); ++r)
            most = std::max(most, static_cast<double>(s.batch_shares[r]) /
                                      static_cast<double>(s.micro_batch) / v[r]);
        return most;
    }
    if (speeds && s.virtual_stages == 1) {
        const std::vector<double> sp = stage_speeds(b.rank_speed, s.dp, s.tp, s.pp);
        if (s.pp <= 1) return 1.0 / sp[0];
        return speed_share(b.spec.model->pipeline_costs(), pipe_counts(b, s), sp);
    }
    if (s.pp <= 1) return 1.0;
    return b.pipe_cache->facts(*b.spec.model, pipe_options(s)).share;
}

// Note [Tables by speed]
// The sharded tables' time S (one micro-batch's, measured on one rank at speed 1) is every rank's
// when their work is even. Over dp ranks without a pipeline or batch shares, a rank serves its
// own tables' lookups for every rank's micro-batch, R f_r S at speed 1, f_r its share of the
// tables' work (ModelFamily::sparse_work_by_rank, with the layout's table_weights or the
// config's own placement), and the step waits for the rank with the most:
// max_r (D + R f_r S) / v_r, D the rest of the micro-batch at speed 1, v_r the rank's declared
// speed (1 without --rank-speed). Even shares at equal speeds give D + S, as before; tables
// placed by memory (`tables by 60+24`) now cost their loaded rank's lookups; with --rank-speed
// the search also places the tables by the speeds (planner/search.cpp). `dense` arrives scaled
// by stage_share (1 / the slowest speed), as the rest of the compute is.
double micro_compute(const PlanBase& base, const Strategy& s, double dense, double sparse) {
    const double even = dense + sparse * stage_share(base, s);
    if (sparse <= 0 || s.dp <= 1 || s.pp > 1 || !s.batch_shares.empty()) return even;
    const std::vector<double> work = base.spec.model->sparse_work_by_rank(s.dp, s.table_weights);
    if (static_cast<int>(work.size()) != s.dp) return even;
    std::vector<double> v(static_cast<size_t>(s.dp), 1.0);
    if (static_cast<int>(base.rank_speed.size()) == s.dp * s.tp * s.pp)
        v = dp_speeds(base.rank_speed, s.dp, s.tp);
    const double dense1 = dense * *std::min_element(v.begin(), v.end());
    double most = 0;
    for (size_t r = 0; r < v.size(); ++r)
        most = std::max(most, (dense1 + s.dp * work[r] * sparse) / v[r]);
    return most;
}

}  // namespace

const PipeFacts& PipeCache::facts(const ModelFamily& m, const PipeOptions& o) {
    const auto key = std::make_tuple(&m, o.stages, o.micro_batches, o.virtual_stages,
                                     static_cast<int>(o.schedule));
    std::lock_guard<std::mutex> lock(mu_);
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    PipeFacts f;
    const PipeCosts costs = m.pipeline_costs();
    f.counts = balanced_partition(o, costs);
    const bool zb = o.schedule == PipeSchedule::kZeroBubble;
    const std::vector<double> pieces = piece_costs(f.counts, costs);
    PipeTimeline t =
        simulate_pipe(o, pipe_schedule(o), 1.0, zb ? 1.0 : 2.0, zb ? 1.0 : 0.0, pieces);
    f.peak_in_flight = std::move(t.peak_in_flight);
    f.peak_pending_w = std::move(t.peak_pending_w);
    const double busiest = *std::max_element(t.busy.begin(), t.busy.end());
    f.idle = busiest > 0 ? t.makespan / busiest - 1.0 : pipe_bubble_formula(o);
    double total = 0, worst = 0;
    for (double c : pieces) total += c;
    for (int st = 0; st < o.stages; ++st) {
        double mine = 0;
        for (int c = 0; c < o.virtual_stages; ++c) mine += pieces[c * o.stages + st];
        worst = std::max(worst, mine);
    }
    f.share = total > 0 ? worst / total : 1.0 / o.stages;
    return memo_.emplace(key, std::move(f)).first->second;
}

int64_t largest_micro_batch(const Strategy& s) {
    int64_t b = s.micro_batch;
    for (int64_t x : s.batch_shares) b = std::max(b, x);
    return b;
}

PolicyActivations layout_activations(const PlanBase& base, const Strategy& s) {
    const ModelFamily& m = *base.spec.model;
    const DType dt = base.spec.state.compute_dtype;
    const bool sp = s.tp > 1 && s.sequence_parallel;
    const int64_t b = largest_micro_batch(s);
    if (s.checkpoint == "blocks") return m.block_activations(b, dt, s.tp, sp, s.blocks);
    const std::vector<PolicyActivations> all =
        s.tp > 1 ? m.activation_policies_split(b, dt, s.tp, sp) : m.activation_policies(b, dt);
    for (const PolicyActivations& p : all)
        if (p.policy == s.checkpoint) return p;
    ZT_FAIL("activation_checkpointing.policy \"", s.checkpoint, "\": ", m.name(),
            " has no such policy");
}

std::vector<int64_t> stage_blocks(const PlanBase& base, const Strategy& s, int k) {
    std::vector<int64_t> out;
    if (s.pp <= 1) {
        for (int64_t l = 0; l < base.spec.model->pipeline_blocks(); ++l) out.push_back(l);
        return out;
    }
    for (const BlockRange& r : pipe_stage(pipe_options(s), pipe_counts(base, s), k).chunks)
        for (int64_t l = r.lo; l < r.hi; ++l) out.push_back(l);
    return out;
}

std::vector<RecomputeFlops> stage_recompute_flops(const PlanBase& base, const Strategy& s) {
    const ModelFamily& m = *base.spec.model;
    const std::vector<BlockRecompute> list =
        s.checkpoint == "blocks" ? s.blocks : m.policy_blocks(s.checkpoint);
    if (list.empty()) return {m.recompute_flops(s.checkpoint)};
    if (s.pp <= 1) return {m.block_recompute_flops(list)};
    const PipeOptions o = pipe_options(s);
    const std::vector<int64_t>& counts = pipe_counts(base, s);
    std::vector<RecomputeFlops> out;
    std::vector<BlockRecompute> mine;
    for (int k = 0; k < s.pp; ++k) {
        mine.clear();
        for (const BlockRange& r : pipe_stage(o, counts, k).chunks)
            mine.insert(mine.end(), list.begin() + r.lo, list.begin() + r.hi);
        out.push_back(m.block_recompute_flops(mine));
    }
    return out;
}

int threads_per_rank(const PlanBase& b, const Strategy& s) {
    if (b.threads > 0) return b.threads;
    return std::max(1, b.cores / ranks_on_host(b, s));
}

int ranks_on_host(const PlanBase& b, const Strategy& s) {
    const int world = s.dp * s.tp * s.pp;
    return b.ranks_per_host > 0 ? std::min(b.ranks_per_host, world) : world;
}

double step_bytes_between_uses(const Estimate& e, int ranks_on_host) {
    const int emb = static_cast<int>(MemCategory::kEmbedding);
    const int64_t own = e.device_total - e.device[emb] + e.host_total - e.host[emb];
    return static_cast<double>(std::max<int64_t>(0, own)) * std::max(1, ranks_on_host);
}

ComputeRates compute_rates(const PlanBase& base, const Strategy& s, const MachineProfile& profile) {
    const int threads = threads_per_rank(base, s);
    const int on_host = ranks_on_host(base, s);
    const ThreadRates r = profile.at_threads(threads);
    const double oversub = std::max(1.0, static_cast<double>(on_host) * threads / base.cores);
    const ModelShape sh = shape_of(*base.spec.model);
    const double b = static_cast<double>(s.micro_batch);
    const int d = base.spec.state.compute_dtype == DType::kF32 ? 0 : 1;
    const double gemm_flops_each = 2.0 * b * sh.T * sh.C * sh.C / s.tp;
    const int z = sh.C > 0 && gemm_flops_each < kGemmSmallFlops ? 0 : 1;
    double gemm_rate = r.gemm_flops[d][z] > 0 ? r.gemm_flops[d][z] : r.gemm_flops[0][1];
    gemm_rate /= oversub;
    const double attn_rate = (r.attention_flops > 0 ? r.attention_flops : gemm_rate) / oversub;
    return {gemm_rate, attn_rate};
}

// Note [Team wakes]
// At more than one thread a kernel loop runs on the OpenMP team only past the engine's measured
// grain (Note [Measured parallel grain], tensor/threads.cpp), and each region it opens costs a
// start: with OMP_WAIT_POLICY=passive the other threads sleep between regions and each region
// wakes them through the kernel (5-116 us an empty region on the 2-vCPU Xeon of session 28). A
// micro-batch opens about as many regions whatever its size (GPT config S at two threads: 237 a
// micro-batch at micro 8 and at micro 2, counted with a uprobe on GOMP_parallel), so more
// micro-batches a step open more: micro 2 x 4 ran 5-10% slower than micro 8 for the same work
// and the same CPU time (perf stat: 18.1 core-s each), and `--auto` chose it, predicted equal.
// The model: for a transformer family whose activations (b T C / tp elements a pass) reach the
// grain, each micro-batch pays 3 regions per parameter tensor (forward, two backward: 300 for
// config S, near the 237 counted) at the profile's team_region_s; below the grain the passes
// run on one thread and the elementwise bytes go at one thread's bandwidth. Both are measured
// (fill_team_costs: by calibrate_machine, or when a plan first needs them): the region 1 ms
// after the last, as a micro-batch opens them (Note [A region in a step's rhythm]), and the
// engine's own grain. The wake's cost on a VM follows the host (5 us one minute, 116 the next
// here), so the term is as good as the moment it was measured.
namespace {

struct TeamCost {
    double wakes_s = 0;                  // the regions' starts, one micro-batch, whole model
    double elementwise_bytes_per_s = 0;  // the passes' bandwidth: the team's or one thread's
};

// The rank's threads, its rates at them and the model's shape as plan_cost has them.
TeamCost team_cost(const PlanBase& base, const Strategy& s, const MachineProfile& profile,
                   int threads, const ThreadRates& r, const ModelShape& sh, double team_bw) {
    TeamCost c;
    c.elementwise_bytes_per_s = team_bw;
    if (threads <= 1 || r.team_region_s <= 0 || r.team_min_elems <= 0 || sh.C <= 0) return c;
    const double pass = static_cast<double>(s.micro_batch) * sh.T * sh.C / s.tp;
    if (pass >= r.team_min_elems) {
        c.wakes_s = 3.0 * static_cast<double>(base.param_tensors) * r.team_region_s;
    } else {
        const ThreadRates one = profile.at_threads(1);
        c.elementwise_bytes_per_s = std::min(team_bw, one.elementwise_bytes_per_s);
    }
    return c;
}

}  // namespace

PlanCost plan_cost(const PlanBase& base, const Strategy& s, const MachineProfile* profile) {
    PlanCost c;
    c.strategy = s;
    c.memory = plan_memory(base, s);
    c.device_bytes = plan_peak_bytes(c.memory);
    if (!profile) return c;
    c.timed = true;
    const ModelFamily& m = *base.spec.model;
    const StateSpec& st = c.memory.spec.state;
    const int threads = threads_per_rank(base, s);
    const int on_host = ranks_on_host(base, s);
    const ThreadRates r = profile->at_threads(threads);
    const ThreadRates all = profile->at_threads(base.cores);
    const double oversub = std::max(1.0, static_cast<double>(on_host) * threads / base.cores);
    const double bw = std::min(r.elementwise_bytes_per_s, all.elementwise_bytes_per_s / on_host);
    const ModelShape sh = shape_of(m);
    const double b = static_cast<double>(s.micro_batch), mb = static_cast<double>(s.grad_accum);
    const double e = static_cast<double>(dtype_size(st.compute_dtype));
    const double g = static_cast<double>(dtype_size(st.grad_dtype));
    const double share = stage_share(base, s) / s.tp;

    // Compute of one micro-batch on the most loaded rank.
    const double flops = m.flops_per_sample() * b;
    const double attn = 12.0 * sh.L * sh.T * sh.T * sh.C * b;
    const ComputeRates rates = compute_rates(base, s, *profile);
    const double gemm_rate = rates.gemm, attn_rate = rates.attention;
    int64_t none_saved = 0;
    for (const PolicyActivations& p : c.memory.policies)
        if (p.policy == "none") none_saved = p.saved;
    if (!s.batch_shares.empty()) {  // the memory's are the largest share's; the mean rank's here
        Strategy mean = s;
        mean.batch_shares.clear();
        mean.checkpoint = "none";
        none_saved = layout_activations(base, mean).saved;
    }
    const double elem_bytes = 4.0 * static_cast<double>(none_saved);
    // Products and lookups the family names, at their measured times where the profile has
    // them (Note [Times by shape], planner/shape_times.cpp); the rest of the FLOPs at the class
    // rate.
    double shaped_s = 0, shaped_flops = 0, shaped_ops = 0;
    const std::vector<GemmShape> gs = m.gemm_shapes(s.micro_batch, s.tp);
    const int64_t cold = cold_class_bytes(step_bytes_between_uses(c.memory, on_host));
    if (const auto sec = gemm_shapes_seconds(*profile, st.compute_dtype, threads, gs, cold)) {
        shaped_s += *sec * oversub;
        shaped_flops += gemm_shapes_flops(gs);
        for (const GemmShape& x : gs)
            shaped_ops += static_cast<double>(x.count);  // a weight's three calls, timed
    }
    if (const auto sec = lookup_shapes_seconds(*profile, threads, m.lookup_shapes(s.micro_batch)))
        shaped_s += *sec * oversub;
    // The sharded tables' lookups, exchanges and updates (Note [Sparse step by shape]).
    const std::vector<SparseShape> sparse = m.sparse_shapes(s.micro_batch);
    double sparse_s = 0;  // at speed 1, on a rank of even share (Note [Tables by speed])
    if (const auto sec = sparse_shapes_seconds(*profile, threads, sparse))
        sparse_s = *sec * oversub;
    const std::optional<SparseExchange> sparse_exchange =
        sparse.empty() ? std::nullopt : sparse_shapes_exchange(*profile, sparse);
    const std::vector<InteractionShape> is = m.interaction_shapes(s.micro_batch);
    if (const auto sec = interaction_shapes_seconds(*profile, threads, is)) {
        shaped_s += *sec * oversub;
        shaped_flops += interaction_shapes_flops(is);
    }
    // The shapes are one rank's (a tensor-parallel family names its split products): their
    // seconds scale with the pipeline share alone, their FLOPs are the group's t-th.
    const double gemm_s = std::max(0.0, flops - attn - shaped_flops * s.tp) * share / gemm_rate +
                          shaped_s * stage_share(base, s);
    const double attn_s = attn * share / attn_rate;
    // Note [Elementwise bytes of a tensor-parallel rank]
    // The activations are already the rank's (activation_policies_split: the split widths'
    // share, the replicated LayerNorms, residuals and row-parallel biases whole, or cut by the
    // sequence under sp), so only the pipeline share applies. They were divided by t again
    // until session 26: GPT config S at tp 2 was predicted 0.09 s a step faster than dp 2 and
    // measured 0.07 s slower (perf: the replicated LayerNorms, adds and biases, +0.08 core-s a
    // step), and the planner chose tp for 2 and 4 ranks where dp was faster.
    const TeamCost team = team_cost(base, s, *profile, threads, r, sh, bw);
    const double elem_s = elem_bytes * stage_share(base, s) / team.elementwise_bytes_per_s;
    StepTime& t = c.time;
    const double ops_s = 3.0 * std::max(0.0, static_cast<double>(base.param_tensors) - shaped_ops) *
                         stage_share(base, s) * r.op_overhead_s * oversub;
    const double wakes_s = team.wakes_s * stage_share(base, s);
    t.compute = micro_compute(base, s, gemm_s + attn_s + elem_s + ops_s + wakes_s, sparse_s) * mb;
    // The policy's second forward (the family's count, Note [Recompute cost] for GPT).
    const auto recompute_s = [&](const RecomputeFlops& rf, double part) {
        return (rf.gemm * b * part / gemm_rate + rf.attention * b * part / attn_rate) * mb;
    };
    const std::vector<RecomputeFlops> stages = stage_recompute_flops(base, s);
    if (stages.size() > 1) {
        // The stages recompute their own blocks (unequally for a list or every_k): the slowest
        // stage's.
        const std::vector<double> speed =
            static_cast<int>(base.rank_speed.size()) != s.dp * s.tp * s.pp
                ? std::vector<double>(static_cast<size_t>(s.pp), 1.0)
                : stage_speeds(base.rank_speed, s.dp, s.tp, s.pp);
        for (size_t k = 0; k < stages.size(); ++k)
            t.recompute = std::max(t.recompute, recompute_s(stages[k], 1.0 / s.tp / speed[k]));
    } else {
        t.recompute = recompute_s(stages.front(), share);
    }

    // The update over this rank's range.
    const double update_numel = static_cast<double>(
        st.zero_stage >= 1 ? c.memory.state.shard_numel : c.memory.state.padded_numel);
    const double update_bytes = (3.0 + 2.0 * st.optimizer_states) * 4.0 * update_numel;
    t.optimizer = update_bytes / bw;
    if (st.offload_optimizer) {
        if (st.offload_nvme && profile->disk_read_bytes_per_s > 0) {
            // Read and written back once a step, both directions at once (Note [Disk
            // calibration], calibrate.cpp).
            const double tier = (4.0 + 4.0 * st.optimizer_states) * update_numel;
            const double both =
                profile->disk_mixed_bytes_per_s > 0
                    ? profile->disk_mixed_bytes_per_s
                    : std::min(profile->disk_read_bytes_per_s, profile->disk_write_bytes_per_s);
            // The tiered step updates each sub-group while the disk moves the others
            // (offload/tiered_state.cpp), so only the I/O beyond the update is added (the 2.5B
            // headline: update 2 s inside 15 s of I/O a step).
            t.offload_io = std::max(0.0, 2 * tier / both - t.optimizer);
        } else {
            t.offload_io = (g + e) * update_numel / bw;
        }
    }
    if (st.offload_param && st.zero_stage >= 3) {
        // Note [Weights from the tier]: the compute weights' shard is read from the tier in the
        // forward and again in the backward (parameters gathered per module, offload/
        // param_tier.h), and written back after the update; counted in full, not behind the
        // compute (measured: a 4-block GPT with a 103M-element wte, ZeRO-3 and both tiers on
        // NVMe, 3.4-3.8 s a step against 2.8-3.0 s with the weights in memory, the forward alone
        // 0.47 s longer for its 0.61 GB; predicted 2.89 s for both before this term).
        const double w = e * static_cast<double>(c.memory.state.shard_numel);
        if (st.offload_param_nvme && profile->disk_read_bytes_per_s > 0 &&
            profile->disk_write_bytes_per_s > 0)
            t.offload_io +=
                2 * w / profile->disk_read_bytes_per_s + w / profile->disk_write_bytes_per_s;
        else
            t.offload_io += 3 * w / bw;  // host memory: copies over the memory bus
    }

    // The fit measured nearest the layout's rank count (Note [Collectives at the run's rank
    // count], calibrate.cpp).
    const CommProfile* cp = profile->comm_for(base.backend, s.dp * s.tp * s.pp);
    if (cp) {
        const double P = static_cast<double>(c.memory.state.padded_numel);
        auto buckets = [](double numel, double bucket) {
            return std::max(1.0, std::ceil(numel / std::max(1.0, bucket)));
        };
        // One micro-step's forward and backward (recompute runs inside backward), the windows
        // communication can hide behind (Note [Overlapped communication]).
        const double fwd = t.compute / mb / 3, bwd = t.compute / mb * 2 / 3 + t.recompute / mb;
        if (s.dp > 1) {
            const int n = s.dp;
            const double gbytes = P * g, wbytes = P * e;
            const double rb = buckets(P, static_cast<double>(st.reduce_bucket_numel));
            // `bytes` in k calls of bytes / k (buckets, modules).
            auto ar = [&](double bytes, double k) {
                return k * cp->all_reduce.time_s(bytes / k, all_reduce_bus_factor(n));
            };
            auto rs = [&](double bytes, double k) {
                return k * cp->reduce_scatter.time_s(bytes / k, shard_bus_factor(n));
            };
            auto ag = [&](double bytes, double k) {
                return k * cp->all_gather.time_s(bytes / k, shard_bus_factor(n));
            };
            const bool overlap = overlaps_comm(base, s);
            // The gradient reduction of one backward: behind it with overlap_comm, else after.
            auto reduce = [&](double r, double window) {
                return overlap ? exposed_behind(r, window, rb) : r;
            };
            double exposed = 0;
            switch (st.zero_stage) {
                case 0:
                    t.dp_comm = ar(gbytes, rb);
                    exposed = reduce(t.dp_comm, bwd);  // in the last micro-step's backward
                    break;
                case 1:
                    t.dp_comm = rs(gbytes, rb) + ag(wbytes, 1);
                    exposed = reduce(rs(gbytes, rb), bwd) + ag(wbytes, 1);
                    break;
                case 2:
                    t.dp_comm = mb * rs(gbytes, rb) + ag(wbytes, 1);
                    exposed = mb * reduce(rs(gbytes, rb), bwd) + ag(wbytes, 1);
                    break;
                default: {
                    const double mods = sh.L > 0 ? sh.L : 1;
                    const double r = rs(gbytes, rb), gather = ag(wbytes, mods);
                    t.dp_comm = mb * (r + 2 * gather);
                    // Prefetched gathers hide behind the modules before them; the reductions
                    // share the communicator with the backward's gathers, so only the backward
                    // left over from those can hide them.
                    const bool ahead = st.prefetch_bucket_numel > 0;
                    const double ef = ahead ? exposed_behind(gather, fwd, mods) : gather;
                    const double eb = ahead ? exposed_behind(gather, bwd, mods) : gather;
                    const double left = std::max(0.0, bwd - (gather - eb));
                    exposed = mb * (ef + eb + reduce(r, left));
                    break;
                }
            }
            t.dp_overlapped = std::max(0.0, t.dp_comm - exposed);
        }
        const double act_bytes = b * sh.T * sh.C * e;
        if (s.tp > 1 && sh.L > 0)
            t.tp_comm = mb * 4.0 * sh.L * stage_share(base, s) *
                        cp->all_reduce.time_s(act_bytes, all_reduce_bus_factor(s.tp));
        if (s.dp > 1) t.emb_comm = sparse_exchange_seconds(*cp, s.dp, mb, sparse_exchange);
        if (s.pp > 1) {
            const double one = cp->send_recv.time_s(act_bytes / s.tp, 1.0);
            t.pp_comm = mb * 2.0 * s.virtual_stages * one;  // each chunk sends and returns
            // Sends are nonblocking: only the fill's and the drain's hops wait (v p - 1 each).
            const double hops = 2.0 * (s.virtual_stages * s.pp - 1);
            t.pp_overlapped = std::max(0.0, t.pp_comm - hops * one);
        }
        // Note [Rendezvous on shared cores] (calibrate.cpp): with more rank threads than cores,
        // each collective call waits for ranks that take turns on the cores; the profile's
        // fit at this rank count measured what a call adds with the ranks computing between.
        if (base.backend == "local" && on_host * threads > base.cores && on_host > 1 &&
            cp->rendezvous_s > 0) {
            const double rv = cp->rendezvous_s;
            if (s.dp > 1) {
                const double rb = buckets(P, static_cast<double>(st.reduce_bucket_numel));
                const double units =
                    std::max<double>(1, static_cast<double>(st.buckets.gathered_params));
                const double calls = st.zero_stage == 0   ? rb
                                     : st.zero_stage == 1 ? rb + 1
                                     : st.zero_stage == 2 ? mb * rb + 1
                                                          : mb * (rb + 2 * units);
                t.dp_comm += calls * rv;
                if (sparse_exchange) t.emb_comm += (4 * mb + 2) * rv;
            }
            if (s.tp > 1 && sh.L > 0) t.tp_comm += mb * 4.0 * sh.L * stage_share(base, s) * rv;
            if (s.pp > 1) t.pp_comm += mb * 2.0 * s.virtual_stages * rv;
            // The step's scalars, one call over the world.
            (s.dp > 1 ? t.dp_comm : s.tp > 1 ? t.tp_comm : t.pp_comm) += rv;
        }
        // Note [Copies on busy cores]
        // The local backend moves data by copies that the ranks' own communication threads
        // run on the host's cores. When the ranks' compute threads fill every core, there is
        // no idle core for those copies to run beside the compute: they take it from the
        // compute, and what the overlap would hide is paid in full. Measured before this
        // (session 26, 2 cores): GPT config S dp 2 ZeRO-3, predicted 11 ms exposed and 14 ms
        // hidden, measured 56 ms exposed; config M dp 4 ZeRO-3, 64 and 89 ms, measured 373 ms
        // exposed; the planner chose ZeRO-3 where it ran 1.10-1.18x the fastest layout. (The
        // exposed time measured is larger still: not all of it is modelled.)
        if (base.backend == "local" && on_host * threads >= base.cores) {
            t.dp_overlapped = 0;
            t.pp_overlapped = 0;
        }
    }
    if (s.pp > 1) {
        // Note [Bubble of uneven pieces]
        // The schedule's formula assumes equal pieces. The balanced cut of a model with a large
        // head is not equal (GPT config M on 2 stages: 8 blocks against 4 blocks and the head,
        // 8.47 block-units), and the measured bubble was 0.162 against the formula's 0.125; an
        // interleaved cut is further off. The idle time is the schedule simulated with each
        // piece's ops scaled by its cost: span over the busiest rank's compute, minus 1 (the
        // formula exactly where the pieces are equal). Counts given by the layout (ranks of
        // unequal speed) keep the formula.
        const PipeOptions o = pipe_options(s);
        const double idle = s.partition.empty() ? base.pipe_cache->facts(*base.spec.model, o).idle
                                                : pipe_bubble_formula(o);
        t.bubble = (t.compute + t.recompute) * idle;
        // Note [Bubble on shared cores]
        // Ranks that share a host's cores (more rank threads than cores) run at 1 / oversub of
        // their speed, but a rank idle in the bubble leaves its core to the others: the host's
        // work is done no sooner than all of it over the cores (w, the slowed compute: the
        // layout's ranks carry equal pieces) and no sooner than one rank's path at full speed
        // (w / oversub, and its idle share of that). GPT config S, pp 2 x dp 2 on 2 cores: the
        // bubble at the slowed rate put it at 2.02-2.15 s a step where it ran in 1.53-1.59 s,
        // as fast as dp 4 (1.50-1.60 s); config M 10.1 s against 8.1.
        if (oversub > 1) {
            const double w = t.compute + t.recompute;
            t.bubble = std::max(0.0, w / oversub * (1.0 + idle) - w);
        }
    }
    return c;
}

}  // namespace zt
