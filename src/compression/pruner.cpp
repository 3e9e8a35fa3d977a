#include "compression/pruner.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace zt {

std::vector<PruneTarget> prune_targets(const std::vector<Parameter*>& params,
                                       const std::vector<std::string>& patterns) {
    std::vector<PruneTarget> out;
    for (const Parameter* p : params) {
        if (!p->prunable || p->shape.size() != 2) continue;
        bool match = patterns.empty();
        for (const std::string& s : patterns) match = match || p->name.find(s) != std::string::npos;
        if (match) out.push_back({p->name, p->offset, p->shape[0], p->shape[1]});
    }
    std::string list;
    for (const std::string& s : patterns) list += (list.empty() ? "\"" : ", \"") + s + "\"";
    ZT_CHECK(!out.empty(), "compression.pruning.params: ",
             patterns.empty() ? std::string("the model has no Linear weight to prune")
                              : str_cat("no Linear weight's name contains any of ", list),
             "; name parts of Linear weights (\"attn\", \"mlp\", \"bot_l\", ...)");
    return out;
}

Pruner::Pruner(PruningOptions options, std::vector<PruneTarget> targets, int64_t padded,
               Range update, int state_index, std::unique_ptr<PruneView> view)
    : options_(std::move(options)),
      targets_(view ? view->targets() : std::move(targets)),
      padded_(padded),
      update_(update),
      state_index_(state_index),
      view_(std::move(view)),
      bits_(static_cast<size_t>((update.size() + 63) / 64), 0),
      pruned_per_target_(targets_.size(), 0) {
    ZT_CHECK(!view_ || options_.type != "rows",
             "compression.pruning.type \"rows\": not supported with tensor or pipeline "
             "parallelism (embedding rows are pruned in the data-parallel layout)");
}

void Pruner::set_unit_groups(std::vector<PruneUnitGroup> groups) {
    groups_ = view_ ? view_->groups(groups) : std::move(groups);
    pruned_per_group_.assign(groups_.size(), 0);
}

void Pruner::set_row_tables(std::vector<PruneRowTable> tables) {
    row_tables_ = std::move(tables);
    row_counts_.clear();
    for (const PruneRowTable& t : row_tables_)
        row_counts_.emplace_back(static_cast<size_t>(t.rows), 0.0);
    row_counts_local_ = row_counts_;
}

void Pruner::count(const ClickBatch& batch) { count_rows(batch, row_tables_, row_counts_local_); }

void Pruner::reduce_counts(Communicator* comm) {
    // Every table's counts in one all-reduce. Counts are integers below 2^53: the f64 sum is
    // exact in any order.
    if (comm != nullptr && comm->size() > 1) {
        std::vector<double> all;
        for (const std::vector<double>& mine : row_counts_local_)
            all.insert(all.end(), mine.begin(), mine.end());
        comm->all_reduce(all.data(), static_cast<int64_t>(all.size()), CommType::kF64)->wait();
        size_t at = 0;
        for (std::vector<double>& mine : row_counts_local_) {
            std::copy(all.begin() + static_cast<std::ptrdiff_t>(at),
                      all.begin() + static_cast<std::ptrdiff_t>(at + mine.size()), mine.begin());
            at += mine.size();
        }
    }
    for (size_t k = 0; k < row_counts_.size(); ++k) {
        std::vector<double>& mine = row_counts_local_[k];
        for (size_t r = 0; r < mine.size(); ++r) row_counts_[k][r] += mine[r];
        std::fill(mine.begin(), mine.end(), 0.0);
    }
}

void Pruner::set_row_counts(std::vector<std::vector<double>> counts) {
    ZT_CHECK(counts.size() == row_counts_.size(), "pruning: the checkpoint counts rows of ",
             counts.size(), " tables, this model has ", row_counts_.size());
    for (size_t k = 0; k < counts.size(); ++k)
        ZT_CHECK(counts[k].size() == row_counts_[k].size(), "pruning: the checkpoint counts ",
                 counts[k].size(), " rows of ", row_tables_[k].name, ", this model has ",
                 row_counts_[k].size());
    row_counts_ = std::move(counts);
}

void Pruner::mask_grads(float* g) const {
    for (size_t w = 0; w < bits_.size(); ++w)
        for (uint64_t b = bits_[w]; b != 0; b &= b - 1)
            g[static_cast<int64_t>(w * 64) + __builtin_ctzll(b)] = 0.0f;
}

void Pruner::update(int64_t step, UpdateState& state, ZeroDataParallel& dp) {
    const int64_t n = update_.size();
    std::vector<float> master(static_cast<size_t>(n)), mask(static_cast<size_t>(n));
    state.read(0, 0, n, master.data());
    state.read(state_index_, 0, n, mask.data());
    // Score = |w|, or -1 for a weight pruned already.
    std::vector<float> score(static_cast<size_t>(n));
    for (size_t i = 0; i < score.size(); ++i)
        score[i] = mask[i] != 0.0f ? -1.0f : std::fabs(master[i]);
    const std::vector<float> whole = whole_model(dp.gather_update_ranges(score.data()));
    std::vector<uint8_t> pruned(whole.size(), 0);
    if (options_.type == "rows") {  // the masks so far, then the counts choose (prune_rows.h)
        for (size_t i = 0; i < whole.size(); ++i) pruned[i] = whole[i] < 0.0f ? 1 : 0;
        const double fraction = prune_sparsity_at(options_, step);
        for (size_t k = 0; k < row_tables_.size(); ++k) {
            const PruneRowTable& t = row_tables_[k];
            set_row_mask(
                t, row_mask(row_counts_[k], rows_of_mask(t, pruned), prune_count(fraction, t.rows)),
                pruned);
        }
    } else if (options_.type == "structured") {
        ZT_ASSERT(!groups_.empty(), "structured pruning without unit groups");
        std::vector<int64_t> counts;
        for (const PruneUnitGroup& g : groups_)
            counts.push_back(prune_count(g.kind == "heads" ? prune_heads_at(options_, step)
                                                           : prune_channels_at(options_, step),
                                         g.units));
        structured_mask(whole, groups_, counts, pruned);
    } else if (options_.type == "nm") {
        nm_mask(whole, targets_, options_.n, options_.m, pruned);
    } else {
        magnitude_mask(whole, targets_, prune_sparsity_at(options_, step),
                       options_.scope == "global", pruned);
    }
    // The new mask over the update range; the pruned weights and their optimizer state to 0.
    const std::vector<uint8_t> arena = to_arena(pruned);
    for (size_t i = 0; i < mask.size(); ++i)
        mask[i] = arena[static_cast<size_t>(update_.lo) + i] ? 1.0f : 0.0f;
    state.write(state_index_, 0, n, mask.data());
    std::vector<float> buf = std::move(master);
    const int tensors = static_cast<int>(state.names().size());
    for (int which = 0; which < tensors; ++which) {
        if (which == state_index_) continue;
        if (which > 0) state.read(which, 0, n, buf.data());
        for (size_t i = 0; i < buf.size(); ++i)
            if (mask[i] != 0.0f) buf[i] = 0.0f;
        state.write(which, 0, n, buf.data());
    }
    state.refresh_compute();
    set_mask(arena, pruned);
}

void Pruner::reload(UpdateState& state, ZeroDataParallel& dp) {
    const int64_t n = update_.size();
    std::vector<float> mask(static_cast<size_t>(n));
    state.read(state_index_, 0, n, mask.data());
    const std::vector<float> whole = whole_model(dp.gather_update_ranges(mask.data()));
    std::vector<uint8_t> pruned(whole.size());
    for (size_t i = 0; i < whole.size(); ++i) pruned[i] = whole[i] != 0.0f ? 1 : 0;
    set_mask(to_arena(pruned), pruned);
}

std::vector<float> Pruner::whole_model(std::vector<float> arena) const {
    if (view_) return view_->gather(arena);
    return arena;
}

std::vector<uint8_t> Pruner::to_arena(const std::vector<uint8_t>& whole) const {
    return view_ ? view_->scatter(whole, padded_) : whole;
}

void Pruner::set_mask(const std::vector<uint8_t>& arena, const std::vector<uint8_t>& whole) {
    std::fill(bits_.begin(), bits_.end(), 0);
    for (int64_t i = 0; i < update_.size(); ++i)
        if (arena[static_cast<size_t>(update_.lo + i)])
            bits_[static_cast<size_t>(i / 64)] |= uint64_t{1} << (i % 64);
    for (size_t t = 0; t < targets_.size(); ++t) {
        int64_t c = 0;
        for (int64_t i = targets_[t].offset; i < targets_[t].offset + targets_[t].numel(); ++i)
            c += whole[static_cast<size_t>(i)];
        pruned_per_target_[t] = c;
    }
    if (!groups_.empty()) pruned_per_group_ = pruned_units(groups_, whole);
}

double Pruner::sparsity() const {
    int64_t pruned = 0, total = 0;
    for (size_t t = 0; t < targets_.size(); ++t) {
        pruned += pruned_per_target_[t];
        total += targets_[t].numel();
    }
    return static_cast<double>(pruned) / static_cast<double>(total);
}

nlohmann::json Pruner::metrics(int64_t step, bool layers) const {
    int64_t pruned = 0;
    for (int64_t c : pruned_per_target_) pruned += c;
    nlohmann::json j = {{"sparsity", sparsity()}, {"pruned", pruned}};
    if (options_.type == "structured") {
        for (const char* kind : {"heads", "channels"}) {
            int64_t most = 0;
            for (size_t g = 0; g < groups_.size(); ++g)
                if (groups_[g].kind == kind) most = std::max(most, pruned_per_group_[g]);
            const bool heads = std::string(kind) == "heads";
            j[kind] = {{"target",
                        heads ? prune_heads_at(options_, step) : prune_channels_at(options_, step)},
                       {"pruned", most}};
        }
    } else {
        j["target"] = prune_sparsity_at(options_, step);
    }
    if (layers) {
        nlohmann::json per = nlohmann::json::object();
        for (size_t t = 0; t < targets_.size(); ++t)
            per[targets_[t].name] = static_cast<double>(pruned_per_target_[t]) /
                                    static_cast<double>(targets_[t].numel());
        j["layers"] = per;
    }
    return j;
}

}  // namespace zt
