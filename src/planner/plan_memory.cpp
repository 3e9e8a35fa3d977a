// The planner's memory of a layout (cost_model.h): `zerotrain estimate`'s figures for the
// layout's parameter count, ranks, ZeRO stage and offload tier, with its activations as the
// layout keeps them (checkpointing lists, pipeline stages in flight, zero bubble), and the peak
// those bytes reach at once.
#include <algorithm>
#include <cmath>
#include <optional>

#include "parallel/pipeline_partition.h"
#include "planner/cost_model.h"
#include "util/error.h"

namespace zt {

namespace {

// Note [Stage of a per-block list]
// A pipeline stage's saved activations are the whole model's scaled by the stage's share of the
// blocks (the embedding and head bytes spread with them). For a per-block list the share is
// taken of the list's figure with every block recomputed whole, and each of the stage's blocks
// then adds what its own choice keeps beyond that (block_extra_saved): a stage whose blocks are
// recomputed holds less than one whose blocks are not. A list of one choice gives exactly the
// named policy's figure, as the additive byte model of the family makes the extras sum up.
// Block l's saved bytes under its list choice beyond "full" (one micro-batch, the layout's t, sp).
std::vector<double> block_extra_saved(const PlanBase& base, const Strategy& s) {
    const std::vector<std::array<double, 3>> all = block_extra_bytes(base, s);
    std::vector<double> extra(s.blocks.size(), 0.0);
    for (size_t l = 0; l < extra.size(); ++l)
        extra[l] = all[l][BlockMemoryModel::index(s.blocks[l])];
    return extra;
}

}  // namespace

std::vector<std::array<double, 3>> block_extra_bytes(const PlanBase& base, const Strategy& s) {
    const ModelFamily& m = *base.spec.model;
    const DType dt = base.spec.state.compute_dtype;
    const bool sp = s.tp > 1 && s.sequence_parallel;
    const size_t n = static_cast<size_t>(m.pipeline_blocks());
    const int64_t b = largest_micro_batch(s);
    std::vector<std::array<double, 3>> extra(n);
    const size_t full = BlockMemoryModel::index(BlockRecompute::kFull);
    if (const std::optional<BlockMemoryModel> mm = m.block_memory(b, dt, s.tp, sp)) {
        for (size_t l = 0; l < n; ++l)
            for (size_t c = 0; c < 3; ++c)
                extra[l][c] =
                    static_cast<double>(mm->blocks[l][c].saved - mm->blocks[l][full].saved);
        return extra;
    }
    // A family without the model by block: each block changed alone in the all-full list.
    std::vector<BlockRecompute> v(n, BlockRecompute::kFull);
    const int64_t all_full = m.block_activations(b, dt, s.tp, sp, v).saved;
    for (size_t l = 0; l < n; ++l)
        for (size_t c = 0; c < 3; ++c) {
            v[l] = kBlockRecomputes[c];
            extra[l][c] =
                static_cast<double>(m.block_activations(b, dt, s.tp, sp, v).saved - all_full);
            v[l] = BlockRecompute::kFull;
        }
    return extra;
}

Estimate plan_memory(const PlanBase& base, const Strategy& s) {
    return plan_memory_of_stage(base, s, -1);
}

// only < 0: the most loaded stage's figures (each the largest over the stages).
Estimate plan_memory_of_stage(const PlanBase& base, const Strategy& s, int only) {
    ZT_ASSERT(base.spec.model, "plan: no model family");
    ZT_ASSERT(only < s.pp, "plan_memory_of_stage: stage ", only, " of ", s.pp);
    const auto counted = [only](int k) { return only < 0 || k == only; };
    const ModelFamily& m = *base.spec.model;
    EstimateSpec spec = base.spec;
    spec.micro_batch = largest_micro_batch(s);  // the rank of the largest share holds the most
    spec.tp = s.tp;
    spec.sequence_parallel = s.tp > 1 && s.sequence_parallel;
    spec.pp = s.pp;
    spec.threads = threads_per_rank(base, s);
    StateSpec& st = spec.state;
    st.ranks = s.dp;
    st.zero_stage = s.zero_stage;
    st.offload_optimizer = s.offload != "none";
    st.offload_nvme = s.offload == "nvme";
    st.offload_param = st.offload_optimizer && base.spec.state.offload_param;
    st.offload_param_nvme = st.offload_param && base.spec.state.offload_param_nvme;
    if (s.tp > 1) m.check_tensor_parallel(s.tp);
    const PipeFacts* pf = nullptr;
    std::optional<PipeOptions> o;
    if (s.pp > 1) {
        ZT_CHECK(m.pipeline_blocks() > 0, m.name(), " has no pipeline split");
        o = pipe_options(s);
        validate_pipe(*o, m.pipeline_blocks());
        pf = &base.pipe_cache->facts(m, *o);
        if (!s.partition.empty()) check_partition(*o, s.partition, m.pipeline_blocks());
        st.param_count = 0;
        std::vector<PipeStage> stages;
        for (int k = 0; k < s.pp; ++k) {
            if (!counted(k)) continue;
            stages.push_back(pipe_stage(*o, pipe_counts(base, s), k));
            st.param_count = std::max(st.param_count, m.param_count_stage(s.tp, stages.back()));
        }
        st.buckets =
            buckets_of(m, s.tp, stages, s.dp, st.reduce_bucket_numel, st.persistence_threshold);
    } else {
        st.param_count = s.tp > 1 ? m.param_count_split(s.tp) : m.param_count();
        st.buckets =
            buckets_of(m, s.tp, {}, s.dp, st.reduce_bucket_numel, st.persistence_threshold);
    }
    Estimate e = estimate_run(spec);
    if (!s.table_weights.empty()) {
        // Tables placed by the layout's weights: the most loaded rank's bytes of them in place
        // of the config's placement (over_rank_memory checks each rank against its own budget).
        const std::vector<int64_t> each = m.sparse_bytes_by_rank(s.dp, s.table_weights);
        const int64_t d =
            *std::max_element(each.begin(), each.end()) - m.sparse_bytes_per_rank(s.dp);
        e.device[static_cast<int>(MemCategory::kEmbedding)] += d;
        e.device_total += d;
    }
    const PolicyActivations* chosen = nullptr;
    PolicyActivations listed;
    if (s.checkpoint == "blocks") {
        listed = layout_activations(base, s);
        chosen = &listed;
    }
    for (const PolicyActivations& p : e.policies)
        if (!chosen && p.policy == s.checkpoint) chosen = &p;
    ZT_CHECK(chosen, "activation_checkpointing.policy \"", s.checkpoint, "\": ", m.name(),
             " has no such policy");
    PolicyActivations act = *chosen;
    if (pf) {
        // Micro-batches in flight on each stage (the schedule's simulation), each holding what
        // the stage keeps of one, plus a backward's transient.
        const double blocks = static_cast<double>(m.pipeline_blocks());
        // Note [A stage's own activations]
        // With the family's bytes by block (BlockMemoryModel) and a policy that names each
        // block's choice, a stage's chunk holds its own blocks' saved bytes, the embeddings'
        // (`below`) when it starts the model and the head's when it ends it; and its backward
        // goes past what it saved by the head's transient (its logits' gradient and loss rows)
        // on the last stage, elsewhere by one of its blocks' backward at most (a block's
        // backward high-water less what it saved). Before, each stage took its share of the
        // whole model's saved bytes by block count and the whole backward's transient: GPT
        // config M on 2 stages (1F1B, 4 micro-batches of 1) peaked 10% under that prediction,
        // the first stage charged 8/12 of the 103 MB logits twice over and the head's 207 MB
        // transient besides. Families without the bytes by block keep the share, and so do
        // lists with blocks recomputed whole (below).
        const std::optional<BlockMemoryModel> mm = m.block_memory(
            largest_micro_batch(s), st.compute_dtype, s.tp, s.tp > 1 && s.sequence_parallel);
        const size_t nblocks = static_cast<size_t>(m.pipeline_blocks());
        const std::vector<BlockRecompute> list =
            s.checkpoint == "blocks" ? s.blocks : m.policy_blocks(s.checkpoint);
        // Blocks recomputed whole are left to the share: a stage of them went past its own
        // figure (GPT config S, pp 2, "every": 1.008 of the prediction, "every_k" 2 1.016;
        // the share gives an upper bound there).
        const bool by_block =
            mm && mm->blocks.size() == nblocks && list.size() == nblocks &&
            std::find(list.begin(), list.end(), BlockRecompute::kFull) == list.end();
        const auto choice = [&](int64_t l) {
            return BlockMemoryModel::index(list[static_cast<size_t>(l)]);
        };
        // Without them, a per-block list's extras over "full" (Note [Stage of a per-block list]).
        std::vector<double> extra;
        double all_extra = 0;
        if (!by_block && s.checkpoint == "blocks") {
            extra = block_extra_saved(base, s);
            for (double x : extra) all_extra += x;
        }
        // The largest chunk's saved bytes and the largest of its blocks' backward transients.
        const auto own = [&](const PipeStage& ps) {
            double chunk_saved = 0, transient = 0;
            for (const BlockRange& r : ps.chunks) {
                double c = 0;
                if (r.lo == 0) c += static_cast<double>(mm->below);
                for (int64_t l = r.lo; l < r.hi; ++l) {
                    const BlockBytes& bb = mm->blocks[static_cast<size_t>(l)][choice(l)];
                    c += static_cast<double>(bb.saved);
                    transient = std::max(transient, static_cast<double>(bb.backward - bb.saved));
                }
                if (r.hi == static_cast<int64_t>(nblocks)) c += static_cast<double>(mm->head_saved);
                chunk_saved = std::max(chunk_saved, c);
            }
            return std::pair{chunk_saved, transient};
        };
        double saved = 0, peak = 0;
        for (int k = 0; k < s.pp; ++k) {
            if (!counted(k)) continue;
            const PipeStage ps = pipe_stage(*o, pipe_counts(base, s), k);
            double held = 0;
            for (const BlockRange& r : ps.chunks) held += static_cast<double>(r.size());
            const double chunk = held / ps.chunk_count() / blocks;  // one chunk's share
            // Per-block lists: the all-full figure's share plus the stage's own blocks' extra
            // bytes (Note [Stage of a per-block list]).
            double stage_saved = static_cast<double>(chosen->saved) * chunk;
            std::optional<double> own_transient;
            if (by_block) {
                const auto [c, t] = own(ps);
                stage_saved = c;
                own_transient = t;
            } else if (s.checkpoint == "blocks") {
                double mine = 0;
                for (const BlockRange& r : ps.chunks)
                    for (int64_t l = r.lo; l < r.hi; ++l) mine += extra[static_cast<size_t>(l)];
                stage_saved = (static_cast<double>(chosen->saved) - all_extra) * chunk +
                              mine / ps.chunk_count();
            }
            // Zero bubble: each micro-batch between its B and its W (Note [Zero bubble memory]).
            const double deferred = static_cast<double>(m.deferred_weight_grad_bytes(
                s.micro_batch, st.compute_dtype, static_cast<int64_t>(held), k == s.pp - 1, s.tp));
            const double sv =
                stage_saved * pf->peak_in_flight[k] + deferred * pf->peak_pending_w[k];
            // The transient of a backward is not split: the last stage's (head, logits, loss)
            // is most of it for a small model (measured: a 4-block GPT with 64-token vocab,
            // zero bubble, checkpoint every, went past a budget the split figure fit). Other
            // stages: their largest block's (Note [A stage's own activations]).
            double transient = static_cast<double>(chosen->peak - chosen->saved);
            if (own_transient && k != s.pp - 1) transient = std::min(transient, *own_transient);
            const double pk = sv + transient;
            saved = std::max(saved, sv);
            peak = std::max(peak, pk);
        }
        act.saved = std::llround(saved);
        act.peak = std::llround(peak);
    }
    const int a = static_cast<int>(MemCategory::kActivations);
    e.device[a] += act.peak - e.activations.peak;
    e.device_total += act.peak - e.activations.peak;
    e.activations = act;
    return e;
}

// Note [Zero bubble memory]
// A zero-bubble backward defers each Linear's weight gradient to the W pass, and the deferred
// work holds the Linear's input and output gradient (autograd/ops/linear.cpp) from B to W. The
// planner counted only the micro-batches between F and B, and under-predicted the peak (GPT, 2
// blocks, pp 2, 2 micro-batches of 2, checkpoint every, optimizer offloaded: predicted 162,816
// bytes, measured 199,680, and `train --auto` then stopped at its own budget). Each stage now
// adds the family's deferred bytes (ModelFamily::deferred_weight_grad_bytes) times the
// simulated most micro-batches between B and W (PipeTimeline::peak_pending_w): 238,304
// predicted. An upper bound: W frees each Linear's pair as it goes, and inputs that the
// forward saved anyway are counted twice (measured 12-18% under the prediction).

// Note [Peak of stages 0 and 1]
// estimate.h sums the categories, an upper bound. At ZeRO stages 0 and 1 the gradients are
// reduced once, after the step's last backward has freed its activations and kernel scratch, so
// the reduce's comm buffers never live beside them: the peak is the model state plus the larger
// of the two. Stages 2 and 3 reduce buckets while backward runs, and the sum stands (measured:
// GPT config S on 2 ranks, peak within 0.1% of the sum at stages 2 and 3, 14% under it at 0 and 1).
// 1-bit Adam's residuals (StateEstimate::resident_comm) stay beside the activations and are
// never traded against them.
// At stages 2 and 3, the received share of the last bucket is traded the same way (Note
// [Reduce buckets in the estimate], state_bytes.cpp).
int64_t plan_peak_bytes(const Estimate& e) {
    const int64_t comm =
        e.spec.state.zero_stage >= 2
            ? e.state.after_backward_comm
            : e.device[static_cast<int>(MemCategory::kComm)] - e.state.resident_comm;
    if (comm == 0) return e.device_total;
    const int64_t act = e.device[static_cast<int>(MemCategory::kActivations)];
    return e.device_total - std::min(comm, act + e.workspace_transient);
}

}  // namespace zt
