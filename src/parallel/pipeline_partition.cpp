// Pipeline stage partition (pipeline_partition.h).
#include "parallel/pipeline_partition.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "util/error.h"

namespace zt {

namespace {

// Cost of blocks [lo, hi) as piece k of n pieces.
double range_cost(const PipeCosts& c, const std::vector<double>& prefix, int64_t lo, int64_t hi,
                  int64_t k, int64_t n) {
    double x = prefix[static_cast<size_t>(hi)] - prefix[static_cast<size_t>(lo)];
    if (k == 0) x += c.first;
    if (k == n - 1) x += c.last;
    return x;
}

// Note [Balanced interleaved pieces]
// An interleaved rank runs its v pieces one after another for every micro-batch, so its step is
// bounded by the sum of its own pieces' costs, and its bubble by the pieces on the warm-up and
// cool-down path. Equal pieces (Megatron-LM's split) leave a large head's cost on one rank: on
// GPT config M (12 blocks, the head worth 4.9 of them, 2 ranks x 2 chunks) rank 1 holds 10.9
// block-units of work against rank 0's 6 and the measured bubble is 0.22 against the formula's
// 0.06 (docs/benchmarks-3d.md). The contiguous cut's objective (the largest piece) does not see
// which rank a piece lands on, so the interleaved cut is chosen by its simulated step instead:
// the schedule run with each piece's ops scaled by its cost (simulate_pipe, backward twice the
// forward), starting from equal pieces and taking, while any shortens the step, the move of one
// block from one piece to another (the pieces between shift by one) that shortens it most; the
// first of equal moves, so the result is deterministic. Each step shortens the span, so it ends;
// it is a local search (tested against every cut of small models in pipeline_partition_test).

// Note [Pruned interleaved moves]
// Most moves the search tries cannot shorten the step, and a lower bound on a cut's simulated
// step rules them out without simulating: stage s cannot start before micro-batch 0's forward
// has crossed pieces 0..s-1, it then computes for its whole busy time, and its last op is a
// backward of its piece s (every op it runs precedes one), after which that micro-batch's
// backward still crosses pieces s-1..0. So step >= (t_f + t_b) * (cost of pieces before s) +
// busy(s) for every stage. A move whose bound is not below the best step found is skipped: it
// could not have been taken, so the search takes the same moves as without the bound. The
// bound is given a relative margin of 1e-9 for its rounding, so it never skips a move a
// simulation would have taken.
class InterleavedSearch {
  public:
    explicit InterleavedSearch(const PipeOptions& o) : o_(o), sim_(o, pipe_schedule(o)) {}

    // The simulated step of a cut whose pieces cost pc (piece_costs of its counts).
    double span(const std::vector<double>& pc) {
        return sim_.makespan(kForward, kBackward, 0.0, pc);
    }

    // The bound above on span(pc).
    double lower_bound(const std::vector<double>& pc) const {
        const int p = o_.stages;
        double before = 0, most = 0;
        for (int s = 0; s < p; ++s) {
            double mine = 0;
            for (int c = 0; c < o_.virtual_stages; ++c) mine += pc[static_cast<size_t>(c * p + s)];
            const double busy = (kForward + kBackward) * o_.micro_batches * mine;
            most = std::max(most, (kForward + kBackward) * before + busy);
            before += pc[static_cast<size_t>(s)];
        }
        return most;
    }

  private:
    static constexpr double kForward = 1.0, kBackward = 2.0;  // backward twice the forward
    const PipeOptions& o_;
    PipeSimulator sim_;
};

std::vector<int64_t> interleaved_partition(const PipeOptions& o, const PipeCosts& costs) {
    const int64_t blocks = static_cast<int64_t>(costs.block.size());
    const size_t n = static_cast<size_t>(o.stages) * static_cast<size_t>(o.virtual_stages);
    InterleavedSearch search(o);
    std::vector<int64_t> counts(n, blocks / static_cast<int64_t>(n));
    double span = search.span(piece_costs(counts, costs));
    std::vector<int64_t> c;
    for (;;) {
        std::vector<int64_t> best;
        double best_span = span * (1 - 1e-12);
        for (size_t from = 0; from < n; ++from) {
            if (counts[from] < 2) continue;
            for (size_t to = 0; to < n; ++to) {
                if (to == from) continue;
                c = counts;
                --c[from];
                ++c[to];
                const std::vector<double> pc = piece_costs(c, costs);
                if (search.lower_bound(pc) * (1 - 1e-9) >= best_span) continue;
                const double x = search.span(pc);
                if (x < best_span) {
                    best_span = x;
                    best = c;
                }
            }
        }
        if (best.empty()) return counts;
        counts = std::move(best);
        span = best_span;
    }
}

}  // namespace

std::vector<int64_t> min_max_partition(
    int64_t blocks, int64_t n, const std::function<double(int64_t, int64_t, int64_t)>& cost) {
    ZT_ASSERT(n >= 1 && n <= blocks, "min_max_partition: ", n, " pieces of ", blocks, " blocks");
    // best[k][j]: the least possible maximum piece cost of blocks [0, j) cut into pieces 0..k;
    // cut[k][j]: where piece k starts in that optimum. O(n blocks^2), blocks are few.
    const double inf = std::numeric_limits<double>::infinity();
    const size_t w = static_cast<size_t>(blocks) + 1;
    std::vector<std::vector<double>> best(static_cast<size_t>(n), std::vector<double>(w, inf));
    std::vector<std::vector<int64_t>> cut(static_cast<size_t>(n), std::vector<int64_t>(w, 0));
    for (int64_t j = 1; j <= blocks; ++j) best[0][static_cast<size_t>(j)] = cost(0, j, 0);
    for (int64_t k = 1; k < n; ++k)
        for (int64_t j = k + 1; j <= blocks; ++j)
            for (int64_t i = k; i < j; ++i) {  // piece k is [i, j)
                const double x = std::max(best[static_cast<size_t>(k) - 1][static_cast<size_t>(i)],
                                          cost(i, j, k));
                if (x < best[static_cast<size_t>(k)][static_cast<size_t>(j)]) {
                    best[static_cast<size_t>(k)][static_cast<size_t>(j)] = x;
                    cut[static_cast<size_t>(k)][static_cast<size_t>(j)] = i;
                }
            }
    std::vector<int64_t> counts(static_cast<size_t>(n));
    int64_t j = blocks;
    for (int64_t k = n - 1; k >= 0; --k) {
        const int64_t i = k == 0 ? 0 : cut[static_cast<size_t>(k)][static_cast<size_t>(j)];
        counts[static_cast<size_t>(k)] = j - i;
        j = i;
    }
    return counts;
}

std::vector<int64_t> balanced_partition(const PipeOptions& o, const PipeCosts& costs) {
    const int64_t blocks = static_cast<int64_t>(costs.block.size());
    validate_pipe(o, blocks);
    const int64_t n = static_cast<int64_t>(o.stages) * o.virtual_stages;
    if (o.schedule == PipeSchedule::kInterleaved) return interleaved_partition(o, costs);
    std::vector<double> prefix(static_cast<size_t>(blocks) + 1, 0.0);
    for (int64_t i = 0; i < blocks; ++i)
        prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + costs.block[i];
    return min_max_partition(blocks, n, [&](int64_t i, int64_t j, int64_t k) {
        return range_cost(costs, prefix, i, j, k, n);
    });
}

void check_partition(const PipeOptions& o, const std::vector<int64_t>& counts, int64_t blocks) {
    validate_pipe(o, blocks);
    const int64_t n = static_cast<int64_t>(o.stages) * o.virtual_stages;
    ZT_CHECK(static_cast<int64_t>(counts.size()) == n, "parallel.pipeline.partition: expected ", n,
             " block counts (stages x virtual_stages), got ", counts.size());
    int64_t sum = 0;
    for (size_t k = 0; k < counts.size(); ++k) {
        ZT_CHECK(counts[k] >= 1, "parallel.pipeline.partition: entry ", k, " is ", counts[k],
                 "; every stage needs at least one block");
        sum += counts[k];
    }
    ZT_CHECK(sum == blocks, "parallel.pipeline.partition: the counts add up to ", sum,
             " blocks, the model has ", blocks);
}

PipeStage pipe_stage(const PipeOptions& o, const std::vector<int64_t>& counts, int stage) {
    ZT_ASSERT(stage >= 0 && stage < o.stages);
    ZT_ASSERT(static_cast<int64_t>(counts.size()) ==
              static_cast<int64_t>(o.stages) * o.virtual_stages);
    PipeStage s;
    s.stage = stage;
    s.stages = o.stages;
    s.blocks = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    int64_t lo = 0;
    for (size_t k = 0; k < counts.size(); ++k) {
        if (static_cast<int>(k) % o.stages == stage) s.chunks.push_back({lo, lo + counts[k]});
        lo += counts[k];
    }
    return s;
}

std::vector<double> piece_costs(const std::vector<int64_t>& counts, const PipeCosts& costs) {
    std::vector<double> out;
    int64_t lo = 0;
    const int64_t n = static_cast<int64_t>(counts.size());
    for (int64_t k = 0; k < n; ++k) {
        double x = 0;
        for (int64_t l = lo; l < lo + counts[static_cast<size_t>(k)]; ++l)
            x += costs.block[static_cast<size_t>(l)];
        if (k == 0) x += costs.first;
        if (k == n - 1) x += costs.last;
        out.push_back(x);
        lo += counts[static_cast<size_t>(k)];
    }
    return out;
}

}  // namespace zt
