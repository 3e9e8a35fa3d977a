#include "planner/layer_search.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <span>

#include "planner/hetero.h"
#include "util/error.h"

namespace zt {

std::optional<std::vector<int>> cheapest_within(const std::vector<std::vector<LayerOption>>& layers,
                                                double capacity, int units, double tail) {
    ZT_ASSERT(units >= 1, "cheapest_within: units ", units);
    if (capacity < 0) return std::nullopt;
    const double step = capacity / units;
    const int over = units + 1;  // more than the capacity holds
    auto steps = [&](double bytes) -> int {
        if (bytes <= 0) return 0;
        if (step <= 0) return over;
        const double q = std::ceil(bytes / step - 1e-9);
        return q > units ? over : static_cast<int>(q);
    };
    // The running sum of u steps (rounded up, so at least the true sum) with `extra` on top.
    const double slack = 1e-9 * std::max(1.0, capacity);
    auto fits = [&](size_t u, double extra) {
        return static_cast<double>(u) * step + extra <= capacity + slack;
    };
    const double inf = std::numeric_limits<double>::infinity();
    const size_t width = static_cast<size_t>(units) + 1;
    // best[u]: the least seconds of the layers so far with their bytes in exactly u steps;
    // pick[l][u]: the option of layer l on that path.
    std::vector<double> best(width, inf), next(width);
    best[0] = 0;
    std::vector<std::vector<int>> pick(layers.size(), std::vector<int>(width, -1));
    for (size_t l = 0; l < layers.size(); ++l) {
        ZT_ASSERT(!layers[l].empty(), "cheapest_within: layer ", l, " has no options");
        std::fill(next.begin(), next.end(), inf);
        for (size_t o = 0; o < layers[l].size(); ++o) {
            const LayerOption& x = layers[l][o];
            const int w = steps(x.bytes);
            if (w > units) continue;
            for (size_t u = 0; u + static_cast<size_t>(w) < width; ++u) {
                if (best[u] == inf || !fits(u, x.peak)) continue;
                const double t = best[u] + x.seconds;
                const size_t to = u + static_cast<size_t>(w);
                if (t < next[to]) {
                    next[to] = t;
                    pick[l][to] = static_cast<int>(o);
                }
            }
        }
        best.swap(next);
    }
    size_t at = width;
    for (size_t u = 0; u < width; ++u)
        if (best[u] < inf && fits(u, tail) && (at == width || best[u] < best[at])) at = u;
    if (at == width) return std::nullopt;
    std::vector<int> choice(layers.size());
    for (size_t l = layers.size(); l-- > 0;) {
        const int o = pick[l][at];
        ZT_ASSERT(o >= 0, "cheapest_within: broken path at layer ", l);
        choice[l] = o;
        at -= static_cast<size_t>(steps(layers[l][static_cast<size_t>(o)].bytes));
    }
    return choice;
}

namespace {

// The device peak of stage k of a layout (the whole layout's without a pipeline).
int64_t stage_peak(const PlanBase& base, const Strategy& t, int k) {
    return t.pp > 1 ? plan_peak_bytes(plan_memory_of_stage(base, t, k))
                    : plan_peak_bytes(plan_memory(base, t));
}

Strategy with_list(Strategy s, std::vector<BlockRecompute> v) {
    s.checkpoint = "blocks";
    s.blocks = std::move(v);
    return s;
}

}  // namespace

// Note [Per-layer recompute]
// Each block's three choices cost recompute seconds (the family's block_recompute_flops at the
// layout's product and attention rates) and hold activation bytes.
// - One stage (no pipeline), where the family models its bytes block by block
//   (ModelFamily::block_memory): the device peak is the layout's other bytes plus the
//   activation peak, which is the largest of each block's backward on top of the blocks under it
//   and the head's backward on top of all of them. cheapest_within solves exactly that (its
//   running sum is the blocks' saved bytes, each option's peak its block's backward, the tail
//   the head's), over the room the budget leaves beside the other bytes. Keeping the top block's
//   activations costs nothing when its backward is the peak anyway: a linear model misses that.
// - A pipeline: a stage's peak grows with its blocks' bytes (beyond recomputing them whole,
//   ModelFamily::block_activations of the list with that block changed) by the micro-batches it
//   holds in flight, a slope taken from the stage's peaks with every block kept and every block
//   recomputed; its capacity is its budget less its peak with every block recomputed. Each stage
//   is solved on its own (the pipeline's recompute is the slowest stage's, and each stage's
//   least is the least of the slowest); a stage the linear model let past its budget has its
//   capacity cut by the excess and is solved again.
// On one stage, a last pass from the top block down keeps any block's activations that still fit
// on the byte model (what the rounding of bytes to steps missed). The list is then costed exactly
// like any layout.
std::optional<Strategy> per_block_layout(const PlanBase& base, Strategy s, int64_t budget,
                                         const MachineProfile* profile) {
    const ModelFamily& m = *base.spec.model;
    const int64_t n = m.pipeline_blocks();
    if (!m.recomputes_blocks() || n <= 0) return std::nullopt;
    if (budget <= 0 && base.rank_memory.empty()) return std::nullopt;
    const ComputeRates rates = profile ? compute_rates(base, s, *profile) : ComputeRates{1, 1};
    const auto seconds = [&](BlockRecompute c) {
        const RecomputeFlops f = m.block_recompute_flops(std::span<const BlockRecompute>(&c, 1));
        return f.gemm / rates.gemm + f.attention / rates.attention;
    };
    const int p = std::max(1, s.pp);
    std::vector<int64_t> cap(static_cast<size_t>(p),
                             budget > 0 ? budget : std::numeric_limits<int64_t>::max());
    if (!base.rank_memory.empty()) {
        const std::vector<int64_t> each = stage_budgets(base.rank_memory, s.dp, s.tp, p);
        for (int k = 0; k < p; ++k)
            cap[static_cast<size_t>(k)] = std::min(cap[static_cast<size_t>(k)], each[k]);
    }
    const size_t nb = static_cast<size_t>(n);
    const Strategy full = with_list(s, std::vector<BlockRecompute>(nb, BlockRecompute::kFull));
    for (int k = 0; k < p; ++k)
        if (stage_peak(base, full, k) > cap[static_cast<size_t>(k)])
            return std::nullopt;  // every block recomputed does not fit
    // The first stage past its budget with list v, -1 when every stage fits.
    const auto first_over = [&](const std::vector<BlockRecompute>& v, int64_t* excess) {
        const Strategy t = with_list(s, v);
        for (int k = 0; k < p; ++k) {
            const int64_t peak = stage_peak(base, t, k);
            if (peak > cap[static_cast<size_t>(k)]) {
                *excess = peak - cap[static_cast<size_t>(k)];
                return k;
            }
        }
        return -1;
    };
    const DType dt = base.spec.state.compute_dtype;
    const bool sp = s.tp > 1 && s.sequence_parallel;
    std::vector<BlockRecompute> list(nb, BlockRecompute::kFull);
    int64_t excess = 0;
    bool solved = false;
    if (p == 1) {
        if (const std::optional<BlockMemoryModel> mm =
                m.block_memory(largest_micro_batch(s), dt, s.tp, sp)) {
            const Estimate e = plan_memory(base, full);
            const double room = static_cast<double>(cap[0]) -
                                static_cast<double>(plan_peak_bytes(e) - e.activations.peak) -
                                static_cast<double>(mm->below);
            std::vector<std::vector<LayerOption>> layers(nb);
            for (size_t l = 0; l < nb; ++l)
                for (BlockRecompute c : kBlockRecomputes) {
                    const BlockBytes& b = mm->blocks[l][BlockMemoryModel::index(c)];
                    layers[l].push_back({static_cast<double>(b.saved), seconds(c),
                                         static_cast<double>(b.backward)});
                }
            const auto pick =
                cheapest_within(layers, room, 2048, static_cast<double>(mm->head_peak));
            if (pick) {
                for (size_t l = 0; l < nb; ++l) list[l] = kBlockRecomputes[(*pick)[l]];
                // Keep what the rounding of bytes to steps missed, from the top block down, the
                // cheaper choices first, on the same byte model (an O(n) check each).
                const double other = static_cast<double>(cap[0]) - room;  // with mm->below
                const auto fits = [&] {
                    return other - static_cast<double>(mm->below) +
                               static_cast<double>(mm->peak(list)) <=
                           static_cast<double>(cap[0]);
                };
                const std::vector<BlockRecompute> picked = list;
                for (size_t l = nb; l-- > 0;)
                    for (BlockRecompute c : kBlockRecomputes) {
                        if (seconds(c) >= seconds(list[l])) continue;
                        const BlockRecompute was = list[l];
                        list[l] = c;
                        if (fits()) break;
                        list[l] = was;
                    }
                solved = first_over(list, &excess) < 0;
                if (!solved) {  // the byte model and the layout's estimate disagree
                    list = picked;
                    solved = first_over(list, &excess) < 0;
                }
            }
        }
    }
    if (!solved) {
        const Strategy none = with_list(s, std::vector<BlockRecompute>(nb, BlockRecompute::kNone));
        // Each block's bytes beyond "full" for each choice, one micro-batch.
        const std::vector<std::array<double, 3>> extra = block_extra_bytes(base, s);
        std::vector<double> capacity(static_cast<size_t>(p));
        std::vector<double> slope(static_cast<size_t>(p), 1.0);
        std::vector<std::vector<int64_t>> held(static_cast<size_t>(p));
        for (int k = 0; k < p; ++k) {
            const size_t ks = static_cast<size_t>(k);
            held[ks] = stage_blocks(base, s, p > 1 ? k : -1);
            const int64_t low = stage_peak(base, full, k);
            capacity[ks] = static_cast<double>(cap[ks] - low);
            double kept = 0;
            for (int64_t l : held[ks]) kept += extra[static_cast<size_t>(l)][0];
            const double rise = static_cast<double>(stage_peak(base, none, k) - low);
            if (kept > 0 && rise > 0) slope[ks] = rise / kept;
        }
        const auto solve = [&](int k) {
            const size_t ks = static_cast<size_t>(k);
            std::vector<std::vector<LayerOption>> layers;
            for (int64_t l : held[ks]) {
                std::vector<LayerOption> opts;
                for (size_t c = 0; c < 3; ++c)
                    opts.push_back({extra[static_cast<size_t>(l)][c] * slope[ks],
                                    seconds(kBlockRecomputes[c])});
                layers.push_back(std::move(opts));
            }
            const std::optional<std::vector<int>> pick = cheapest_within(layers, capacity[ks]);
            ZT_ASSERT(pick.has_value(), "per_block_layout: all full must fit stage ", k);
            for (size_t i = 0; i < held[ks].size(); ++i)
                list[static_cast<size_t>(held[ks][i])] = kBlockRecomputes[(*pick)[i]];
        };
        for (int k = 0; k < p; ++k) solve(k);
        for (int attempt = 0;; ++attempt) {
            const int k = first_over(list, &excess);
            if (k < 0) break;
            if (attempt == 8) return std::nullopt;
            const size_t ks = static_cast<size_t>(k);
            capacity[ks] = std::max(0.0, capacity[ks] - static_cast<double>(excess));
            solve(k);
        }
    }
    if (std::all_of(list.begin(), list.end(), [&](BlockRecompute r) { return r == list[0]; }))
        return std::nullopt;
    return with_list(std::move(s), std::move(list));
}

}  // namespace zt
