#include "planner/search.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>

#include "planner/hetero.h"
#include "planner/layer_search.h"
#include "util/error.h"
#include "util/units.h"

namespace zt {

namespace {

std::vector<int> divisors(int64_t n) {
    std::vector<int> d;
    for (int64_t k = 1; k <= n; ++k)
        if (n % k == 0) d.push_back(static_cast<int>(k));
    return d;
}

std::string stage_words(const Strategy& s) {
    return s.zero_stage == 0 ? std::string("DDP (ZeRO-0)") : str_cat("ZeRO-", s.zero_stage);
}

// A group shares model state: dp, tp, pp, ZeRO stage and offload.
struct Group {
    Strategy first;  // its first member
    std::vector<Strategy> members;
};

std::vector<std::string> policies_of(const PlanBase& base, const SearchSpace& space) {
    if (!space.checkpoint.empty()) return space.checkpoint;
    std::vector<std::string> names;
    for (const PolicyActivations& p :
         base.spec.model->activation_policies(1, base.spec.state.compute_dtype))
        if (p.policy != "blocks") names.push_back(p.policy);  // lists: per_block_layout's
    return names;
}

// Note [Stages sized to memory]
// With a device budget per rank (--rank-memory), a pipeline stage holds what its smallest rank's
// budget allows. A stage's peak depends on its own blocks only (its parameters, its buckets,
// and the micro-batches in flight the schedule gives its position), so each stage's most blocks,
// cap k, is found by bisection on the stage's own estimate (plan_memory_of_stage), the others
// holding the rest; then the blocks are cut as speed_partition cuts them (equal speeds without
// --rank-speed) with at most cap k on stage k (capped_partition). No such cut: the layout keeps
// its partition and the budget check rejects it, naming the stage.
Strategy memory_sized(const PlanBase& base, Strategy s) {
    const ModelFamily& m = *base.spec.model;
    const int64_t blocks = m.pipeline_blocks();
    const int p = s.pp;
    const std::vector<int64_t> budget = stage_budgets(base.rank_memory, s.dp, s.tp, p);
    const auto bytes_with = [&](int k, int64_t n) {  // stage k's peak holding n blocks
        Strategy t = s;
        t.partition.assign(static_cast<size_t>(p), 0);
        t.partition[static_cast<size_t>(k)] = n;
        int64_t rest = blocks - n;
        for (int j = 0, left = p - 1; j < p; ++j) {
            if (j == k) continue;
            const int64_t take = rest / left;
            t.partition[static_cast<size_t>(j)] = take;
            rest -= take;
            --left;
        }
        return plan_peak_bytes(plan_memory_of_stage(base, t, k));
    };
    std::vector<int64_t> cap(static_cast<size_t>(p), 0);
    for (int k = 0; k < p; ++k) {
        int64_t lo = 0, hi = blocks - (p - 1);  // lo fits (0: nothing does yet), hi the most
        if (bytes_with(k, 1) > budget[static_cast<size_t>(k)]) continue;
        lo = 1;
        while (lo < hi) {
            const int64_t mid = (lo + hi + 1) / 2;
            if (bytes_with(k, mid) <= budget[static_cast<size_t>(k)])
                lo = mid;
            else
                hi = mid - 1;
        }
        cap[static_cast<size_t>(k)] = lo;
    }
    const std::vector<double> speed = base.rank_speed.empty()
                                          ? std::vector<double>(static_cast<size_t>(p), 1.0)
                                          : stage_speeds(base.rank_speed, s.dp, s.tp, p);
    std::vector<int64_t> counts = capped_partition(m.pipeline_costs(), speed, cap);
    if (!counts.empty()) s.partition = std::move(counts);
    return s;
}

// The layouts of one (dp, tp, pp, stage, offload) in order: micro-batch splits, schedules,
// checkpointing policies, sequence parallelism (tp > 1).
std::vector<Strategy> members_of(const PlanBase& base, Strategy s,
                                 const std::vector<std::string>& policies,
                                 const SearchSpace& space) {
    std::vector<Strategy> out;
    const int64_t per_rank = base.global_batch / s.dp;
    const int64_t blocks = base.spec.model->pipeline_blocks();
    // Ranks of unequal speed: stages sized to their speed, one chunk per rank (planner/hetero.h);
    // of unequal memory: within what each stage's memory holds (memory_sized, per member).
    const bool by_memory = !base.rank_memory.empty() && s.pp > 1;
    const bool uneven = (!base.rank_speed.empty() || by_memory) && s.pp > 1;
    if (uneven && !base.rank_speed.empty())
        s.partition = speed_partition(base.spec.model->pipeline_costs(),
                                      stage_speeds(base.rank_speed, s.dp, s.tp, s.pp));
    // Data-parallel ranks of unequal memory or speed without a pipeline, tables placed whole on
    // ranks: the tables by the ranks' budgets (in MiB) and by their speeds too
    // (embedding.rank_weights; Note [Tables by speed] in cost_model.cpp).
    std::vector<std::vector<double>> table_weights;
    if (s.pp == 1 && s.dp > 1 && (!base.rank_memory.empty() || !base.rank_speed.empty()) &&
        base.spec.model->places_tables_by_weight(s.dp)) {
        const auto add = [&](std::vector<double> w) {
            if (std::any_of(w.begin(), w.end(), [&](double x) { return x != w.front(); }))
                table_weights.push_back(std::move(w));
        };
        if (!base.rank_memory.empty()) {
            std::vector<double> w;
            for (int64_t b : dp_budgets(base.rank_memory, s.dp, s.tp))
                w.push_back(std::max<double>(1.0, std::floor(static_cast<double>(b) / (1 << 20))));
            add(std::move(w));
        }
        if (!base.rank_speed.empty()) add(dp_speeds(base.rank_speed, s.dp, s.tp));
    }
    // Data-parallel ranks of unequal speed without a pipeline: batch shares by speed too, where
    // the engine takes them (not with sharded tables: their exchanges need equal batches).
    std::vector<double> dp_speed;
    if (!base.rank_speed.empty() && s.pp == 1 && s.dp > 1 &&
        base.spec.model->sparse_param_count() == 0) {
        dp_speed = dp_speeds(base.rank_speed, s.dp, s.tp);
        if (std::all_of(dp_speed.begin(), dp_speed.end(),
                        [&](double v) { return v == dp_speed.front(); }))
            dp_speed.clear();
    }
    for (int accum : divisors(per_rank)) {
        s.grad_accum = accum;
        s.micro_batch = per_rank / accum;
        std::vector<std::pair<PipeSchedule, int>> scheds = {{PipeSchedule::kOneFOneB, 1}};
        if (s.pp > 1) {
            scheds.clear();
            for (PipeSchedule sc : space.schedules) {
                if (sc != PipeSchedule::kInterleaved) {
                    scheds.emplace_back(sc, 1);
                } else if (!uneven && blocks % (2 * s.pp) == 0 && accum % s.pp == 0) {
                    scheds.emplace_back(sc, 2);
                }
            }
        }
        for (const auto& [sc, v] : scheds) {
            s.schedule = sc;
            s.virtual_stages = v;
            for (const std::string& p : policies) {
                s.checkpoint = p;
                for (bool sp : {false, true}) {  // parallel.sequence_parallel, with tp only
                    if (sp && s.tp == 1) continue;
                    s.sequence_parallel = sp;
                    out.push_back(by_memory ? memory_sized(base, s) : s);
                    for (const std::vector<double>& w : table_weights) {
                        Strategy placed = s;
                        placed.table_weights = w;
                        out.push_back(std::move(placed));
                    }
                    if (dp_speed.empty()) continue;
                    Strategy shared = s;
                    shared.batch_shares = shares_by_speed(s.micro_batch * s.dp, dp_speed);
                    if (std::any_of(shared.batch_shares.begin(), shared.batch_shares.end(),
                                    [&](int64_t b) { return b != s.micro_batch; }))
                        out.push_back(std::move(shared));
                }
            }
        }
    }
    return out;
}

std::vector<Group> groups_of(const PlanBase& base, const SearchSpace& space) {
    ZT_CHECK(space.ranks >= 1, "plan: --ranks must be >= 1, got ", space.ranks);
    const ModelFamily& m = *base.spec.model;
    const std::vector<std::string> policies = policies_of(base, space);
    std::vector<Group> groups;
    for (int tp : divisors(space.ranks)) {
        if (space.max_tp > 0 && tp > space.max_tp) continue;
        if (tp > 1) {
            try {
                m.check_tensor_parallel(tp);
            } catch (const Error&) {
                continue;  // the family cannot split so
            }
        }
        for (int pp : divisors(space.ranks / tp)) {
            if (space.max_pp > 0 && pp > space.max_pp) continue;
            if (pp > 1 && (m.pipeline_blocks() == 0 || pp > m.pipeline_blocks())) continue;
            const int dp = space.ranks / tp / pp;
            if (base.global_batch % dp != 0) continue;
            for (int stage : space.zero_stages) {
                if (pp > 1 && stage > 1) continue;  // pipelines run stage 0 or 1 (config.md)
                for (const std::string& off : space.offload) {
                    // One rank: stage 1 is stage 0's bytes and work; so are 2 and 3 without
                    // offload, but offloaded they keep the gradients in host memory (Note
                    // [Gradients on the host]) and stage 3 may offload the weights too.
                    if (dp == 1 && stage != 0 && (off == "none" || stage == 1)) continue;
                    Strategy s;
                    s.dp = dp;
                    s.tp = tp;
                    s.pp = pp;
                    s.zero_stage = stage;
                    s.offload = off;
                    Group g;
                    g.members = members_of(base, s, policies, space);
                    if (g.members.empty()) continue;
                    g.first = g.members.front();
                    groups.push_back(std::move(g));
                }
            }
        }
    }
    return groups;
}

// Bytes every member of the group holds whatever its micro-batch and policy: model state.
int64_t state_floor(const Estimate& e) {
    const int a = static_cast<int>(MemCategory::kActivations);
    return e.device_total - e.device[a] - e.workspace_transient;
}

// Ranking: predicted time (memory when untimed), then the label.
bool faster(const PlanCost& a, const PlanCost& b) {
    const double ta = a.timed ? a.time.total() : static_cast<double>(a.device_bytes);
    const double tb = b.timed ? b.time.total() : static_cast<double>(b.device_bytes);
    if (ta != tb) return ta < tb;
    return strategy_label(a.strategy) < strategy_label(b.strategy);
}

bool smaller(const PlanCost& a, const PlanCost& b) {
    if (a.device_bytes != b.device_bytes) return a.device_bytes < b.device_bytes;
    return faster(a, b);
}

}  // namespace

std::vector<Strategy> enumerate_layouts(const PlanBase& base, const SearchSpace& space) {
    std::vector<Strategy> out;
    for (const Group& g : groups_of(base, space))
        out.insert(out.end(), g.members.begin(), g.members.end());
    return out;
}

std::string over_budget_reason(const PlanCost& c, int64_t budget) {
    const auto [cat, bytes] = largest_category(c.memory);
    return str_cat(stage_words(c.strategy), " needs ",
                   format_bytes(static_cast<double>(c.device_bytes)), " > ",
                   format_bytes(static_cast<double>(budget)), ": ", cat, " ",
                   format_bytes(static_cast<double>(bytes)));
}

// Each stage's peak against its smallest rank's budget (--rank-memory); fills c.stage_bytes.
std::string over_rank_memory(const PlanBase& base, PlanCost& c) {
    const Strategy& s = c.strategy;
    const std::vector<int64_t> budget = stage_budgets(base.rank_memory, s.dp, s.tp, s.pp);
    c.stage_bytes.clear();
    std::string why;
    if (!s.table_weights.empty()) {
        // Tables placed by weight: each dp rank holds its own tables beside the common bytes.
        const ModelFamily& m = *base.spec.model;
        const std::vector<int64_t> each = m.sparse_bytes_by_rank(s.dp, s.table_weights);
        const std::vector<int64_t> room = dp_budgets(base.rank_memory, s.dp, s.tp);
        const int64_t most = *std::max_element(each.begin(), each.end());
        c.stage_bytes.push_back(c.device_bytes);
        for (int d = 0; d < s.dp; ++d) {
            const int64_t b = c.device_bytes - most + each[static_cast<size_t>(d)];
            if (b > room[static_cast<size_t>(d)])
                return str_cat(stage_words(s), ", dp rank ", d, " needs ",
                               format_bytes(static_cast<double>(b)), " > ",
                               format_bytes(static_cast<double>(room[static_cast<size_t>(d)])),
                               " (--rank-memory; its tables ",
                               format_bytes(static_cast<double>(each[static_cast<size_t>(d)])),
                               ")");
        }
        return why;
    }
    for (int k = 0; k < s.pp; ++k) {
        const int64_t b =
            s.pp > 1 ? plan_peak_bytes(plan_memory_of_stage(base, s, k)) : c.device_bytes;
        c.stage_bytes.push_back(b);
        if (why.empty() && b > budget[static_cast<size_t>(k)])
            why = str_cat(stage_words(s), s.pp > 1 ? str_cat(", stage ", k) : std::string(),
                          " needs ", format_bytes(static_cast<double>(b)), " > ",
                          format_bytes(static_cast<double>(budget[static_cast<size_t>(k)])),
                          " (--rank-memory of its smallest rank)");
    }
    return why;
}

SearchResult search_plans(const PlanBase& base, const SearchSpace& space,
                          const MachineProfile* profile, const SearchOptions& opt,
                          const StrategyCheck& check) {
    SearchResult res;
    std::vector<PlanCost> fits;
    auto reject = [&](const Strategy& s, std::string why, int64_t bytes) {
        if (static_cast<int64_t>(res.rejected.size()) < opt.max_rejected)
            res.rejected.push_back({s, std::move(why), bytes});
    };
    bool have_smallest = false;
    auto note_smallest = [&](const PlanCost& c) {
        if (!have_smallest || smaller(c, res.smallest)) res.smallest = c;
        have_smallest = true;
    };
    PlanCost last;  // the layout consider() costed last
    // Costs one layout; false when it is rejected.
    const auto consider = [&](const Strategy& s) {
        PlanCost c;
        try {
            c = plan_cost(base, s, profile);
        } catch (const Error& e) {
            reject(s, e.message(), 0);
            return false;
        }
        ++res.costed;
        note_smallest(c);
        last = c;
        if (opt.budget > 0 && c.device_bytes > opt.budget) {
            reject(s, over_budget_reason(c, opt.budget), c.device_bytes);
            return false;
        }
        if (!base.rank_memory.empty()) {
            if (const std::string why = over_rank_memory(base, c); !why.empty()) {
                reject(s, why, c.device_bytes);
                return false;
            }
        }
        if (const int64_t host = c.memory.host_total * ranks_on_host(base, s);
            opt.host_budget > 0 && host > opt.host_budget) {
            const auto [name, largest] = largest_category(c.memory.host);
            reject(s,
                   str_cat(stage_words(s), " needs ",
                           format_bytes(static_cast<double>(c.memory.host_total)),
                           " of host memory per rank x ", ranks_on_host(base, s), " on a host > ",
                           format_bytes(static_cast<double>(opt.host_budget)), " (--host-memory): ",
                           name, " ", format_bytes(static_cast<double>(largest)),
                           " per rank; nvme holds it on disk"),
                   c.device_bytes);
            return false;
        }
        fits.push_back(std::move(c));
        return true;
    };
    // Layouts that keep every activation and do not fit, with their time: the least a per-block
    // list of the same layout can take (its recompute adds to it).
    std::vector<std::pair<double, Strategy>> pending;
    for (const Group& g : groups_of(base, space)) {
        res.candidates += static_cast<int64_t>(g.members.size());
        if (opt.prune && opt.budget > 0) {
            const Estimate first = plan_memory(base, g.first);
            const int64_t floor = state_floor(first);
            if (floor > opt.budget) {
                int64_t largest = 0;
                std::string name;
                for (int k = 0; k < kMemCategoryCount; ++k)
                    if (k != static_cast<int>(MemCategory::kActivations) &&
                        first.device[k] > largest) {
                        largest = first.device[k];
                        name = mem_category_name(static_cast<MemCategory>(k));
                    }
                reject(g.first,
                       str_cat(stage_words(g.first), " needs at least ",
                               format_bytes(static_cast<double>(floor)), " of model state > ",
                               format_bytes(static_cast<double>(opt.budget)), ": ", name, " ",
                               format_bytes(static_cast<double>(largest)), " (all ",
                               g.members.size(), " micro-batch, schedule and checkpoint variants)"),
                       floor);
                continue;
            }
        }
        for (const Strategy& s : g.members) {
            const bool fit = consider(s);
            if (!fit && s.checkpoint == "none" && space.per_block && profile && last.timed &&
                last.strategy == s)
                pending.emplace_back(last.time.total(), s);
        }
    }
    std::sort(fits.begin(), fits.end(), faster);
    // Per-block lists (Note [Per-layer recompute], layer_search.cpp) for the layouts that did not
    // fit keeping every activation, the fastest first, as long as one could still rank among
    // the first (branch and bound on their time without recompute; with a margin for layouts
    // the config check rejects later). Without a profile the ranking is by memory, where a list
    // never passes "every": none are made.
    std::stable_sort(pending.begin(), pending.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    const size_t keep = opt.top > 0 ? static_cast<size_t>(opt.top) * 2 + 5 : SIZE_MAX;
    for (const auto& [bound, s] : pending) {
        if (fits.size() >= keep && bound >= fits[keep - 1].time.total()) break;
        std::optional<Strategy> listed;
        try {
            listed = per_block_layout(base, s, opt.budget, profile);
        } catch (const Error& e) {
            reject(s, e.message(), 0);
        }
        if (!listed) continue;
        ++res.candidates;
        if (consider(*listed)) {  // into its place among the sorted rest (not a sort of them all)
            PlanCost c = std::move(fits.back());
            fits.pop_back();
            fits.insert(std::upper_bound(fits.begin(), fits.end(), c, faster), std::move(c));
        }
    }
    for (PlanCost& c : fits) {
        if (opt.top > 0 && static_cast<int>(res.ranked.size()) >= opt.top) break;
        if (check) {
            const std::string why = check(c.strategy);
            if (!why.empty()) {
                reject(c.strategy, why, c.device_bytes);
                continue;
            }
        }
        res.ranked.push_back(std::move(c));
    }
    if (res.ranked.empty()) {
        res.infeasible = true;
        if (opt.prune && opt.budget > 0) {  // the smallest may sit in a pruned group
            SearchOptions all = opt;
            all.prune = false;
            all.budget = 0;
            all.top = 1;
            SearchResult full = search_plans(base, space, profile, all, {});
            if (full.costed > 0) note_smallest(full.smallest);
        }
        if (have_smallest) {
            const auto [cat, bytes] = largest_category(res.smallest.memory);
            res.smallest_reason = str_cat(
                "the smallest layout (", strategy_label(res.smallest.strategy), ") needs ",
                format_bytes(static_cast<double>(res.smallest.device_bytes)), " per rank",
                opt.budget > 0 ? str_cat(" > ", format_bytes(static_cast<double>(opt.budget)))
                               : std::string(),
                "; its largest part is ", cat, " ", format_bytes(static_cast<double>(bytes)));
        }
    }
    return res;
}

}  // namespace zt
