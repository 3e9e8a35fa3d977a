#include "embedding/dynamic_tables.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>

#include "comm/communicator.h"
#include "embedding/dynamic_tables_detail.h"
#include "util/error.h"

namespace zt {

DynamicTables::DynamicTables(MemoryPool& pool, std::vector<DynamicTableOptions> tables,
                             std::vector<int> features, Communicator* comm,
                             const DynamicTablesOptions& options)
    : pool_(pool),
      features_(std::move(features)),
      comm_(comm && comm->size() > 1 ? comm : nullptr),
      rank_(comm_ ? comm_->rank() : 0),
      ranks_(comm_ ? comm_->size() : 1),
      options_(options),
      optimizer_(options.optimizer) {
    ZT_ASSERT(tables.size() == features_.size(), "one feature per dynamic table");
    tiered_ = options_.tier.on();
    // cache_bytes: every table the same cache rows (each sample looks up one id in each).
    int64_t record_bytes = 0;
    for (const DynamicTableOptions& t : tables)
        record_bytes += (t.dim + sparse_state_per_row(options_.optimizer.kind, t.dim)) * 4;
    for (DynamicTableOptions& t : tables) {
        t.optimizer = options_.optimizer;
        if (tiered_) {
            t.tier = options_.tier;
            t.tier.file_name = str_cat("dynamic-", t.name, "-", rank_);
            if (options_.tier_cache_bytes > 0)
                t.tier.cache_rows = std::max<int64_t>(1, options_.tier_cache_bytes / record_bytes);
        }
        if (t.max_rows > 0) t.max_rows = (t.max_rows + ranks_ - 1) / ranks_;  // per rank
        tables_.push_back(std::make_unique<DynamicTable>(pool_, std::move(t)));
        acc_.push_back(std::make_unique<Acc>());
    }
    global_rows_.assign(tables_.size(), 0);
    gathered_ids_.resize(tables_.size());
    group_stats_.resize(tables_.size());
    if (options_.staleness > 0 && comm_)  // collective: every rank builds it
        stale_comm_ = comm_->split(0, rank_);
}

std::vector<uint64_t> DynamicTables::all_words(const std::vector<uint64_t>& mine) const {
    if (!comm_) return mine;
    const auto R = static_cast<size_t>(ranks_);
    std::vector<int64_t> ones(R, 1), counts(R);
    const auto n = static_cast<int64_t>(mine.size());
    comm_->all_gather(&n, counts.data(), ones, CommType::kI64)->wait();
    int64_t sum = 0;
    for (int64_t c : counts) sum += c;
    std::vector<uint64_t> all(static_cast<size_t>(sum));
    comm_->all_gather(mine.data(), all.data(), counts, CommType::kI64)->wait();
    return all;
}

void DynamicTables::finish_grads() {
    if (options_.staleness > 0) {  // Note [Stale dynamic updates]
        auto step = std::make_unique<HeldStep>();
        step->exchanges = std::move(stale_);
        stale_.clear();
        step->left.resize(tables_.size());
        held_.push_back(std::move(step));
        if (std::ssize(held_) > options_.staleness) land_oldest();
    }
    merge_grads();
    reduce_default_grads();
}

void DynamicTables::merge_grads() {
    for (size_t i = 0; i < tables_.size(); ++i) {
        const DynamicTable& t = *tables_[i];
        Acc& a = *acc_[i];
        const int64_t dim = t.dim();
        std::vector<size_t> order(a.slots.size());
        std::iota(order.begin(), order.end(), size_t{0});
        std::sort(order.begin(), order.end(),
                  [&](size_t x, size_t y) { return t.id_of(a.slots[x]) < t.id_of(a.slots[y]); });
        a.merged_slots.resize(order.size());
        a.merged.resize(order.size() * static_cast<size_t>(dim));
        for (size_t r = 0; r < order.size(); ++r) {
            a.merged_slots[r] = a.slots[order[r]];
            std::memcpy(a.merged.data() + r * static_cast<size_t>(dim),
                        a.grads.data() + order[r] * static_cast<size_t>(dim),
                        static_cast<size_t>(dim) * sizeof(float));
            a.pos[static_cast<size_t>(a.slots[order[r]])] = -1;
        }
        a.slots.clear();
        a.grads.clear();
    }
}

// The default rows' gradients: each rank's part (the unadmitted ids it owns) added over the ranks
// in rank order from zero, so every replica takes the same update.
void DynamicTables::reduce_default_grads() {
    for (size_t i = 0; i < tables_.size(); ++i) {
        DynamicTable& t = *tables_[i];
        Acc& a = *acc_[i];
        a.merged_default = !a.default_grad.empty();
        if (!comm_ || !t.default_row()) continue;
        const int64_t dim = t.dim();
        std::vector<float> mine(static_cast<size_t>(dim + 1), 0.0f);
        mine[0] = a.merged_default ? 1.0f : 0.0f;
        if (a.merged_default)
            std::copy(a.default_grad.begin(), a.default_grad.end(), mine.begin() + 1);
        std::vector<float> all(mine.size() * static_cast<size_t>(ranks_));
        comm_
            ->all_gather(mine.data(), all.data(),
                         std::vector<int64_t>(static_cast<size_t>(ranks_), dim + 1), CommType::kF32)
            ->wait();
        a.merged_default = false;
        a.default_grad.assign(static_cast<size_t>(dim), 0.0f);
        for (int r = 0; r < ranks_; ++r) {
            const float* f = all.data() + static_cast<size_t>(r) * mine.size();
            if (f[0] == 0.0f) continue;
            a.merged_default = true;
            for (int64_t c = 0; c < dim; ++c) a.default_grad[static_cast<size_t>(c)] += f[1 + c];
        }
        if (!a.merged_default) a.default_grad.clear();
    }
}

// Per row in double, added in ascending id order, then the default row (ShardedTables' order on
// one rank: ascending rows).
double DynamicTables::grad_sq_sum() const {
    double sum = 0;
    for (size_t i = 0; i < tables_.size(); ++i) {
        const Acc& a = *acc_[i];
        const int64_t dim = tables_[i]->dim();
        auto row_sq = [&](const float* g) {
            double q = 0;
            for (int64_t c = 0; c < dim; ++c) q += static_cast<double>(g[c]) * g[c];
            return q;
        };
        for (size_t r = 0; r < a.merged_slots.size(); ++r)
            sum += row_sq(a.merged.data() + r * static_cast<size_t>(dim));
        if (a.merged_default && rank_ == 0) sum += row_sq(a.default_grad.data());
    }
    return sum;
}

void DynamicTables::scale_grads(float coef) {
    for (auto& a : acc_) {
        for (float& g : a->merged) g *= coef;
        if (a->merged_default)
            for (float& g : a->default_grad) g *= coef;
    }
}

void DynamicTables::step(double lr, double base_lr, int64_t update) {
    const double rate = options_.lr > 0 && base_lr > 0 ? options_.lr * (lr / base_lr) : lr;
    for (size_t i = 0; i < tables_.size(); ++i) {
        update_table(i, static_cast<float>(rate), update);
        // Evictions: after the update, so no gradient is pending; with staleness the held steps'
        // updates of the rows that leave are dropped when they land (Note [Stale dynamic
        // updates]).
        std::vector<uint64_t> left = tables_[i]->end_step();
        if (options_.staleness > 0 && !held_.empty()) held_.back()->left[i] = std::move(left);
    }
    zero_grads();
    gather_stats();
}

void DynamicTables::update_table(size_t i, float rate, int64_t update) {
    DynamicTable& t = *tables_[i];
    Acc& a = *acc_[i];
    if (!a.merged_slots.empty()) {
        if (options_.staleness > 0)  // rows looked up s steps ago: a tier fetches them again
            t.update_late(optimizer_, a.merged_slots, a.merged.data(), rate, update);
        else
            t.update(optimizer_, a.merged_slots, a.merged.data(), rate, update);
    }
    if (a.merged_default) {
        SparseRowStorage w = t.default_storage();
        const int64_t zero = 0;
        optimizer_.step(w, t.default_state(), std::span<const int64_t>(&zero, 1),
                        a.default_grad.data(), rate, update);
    }
}

// The tables' figures summed over the ranks (load factor: all rows over all map slots), and the ids
// the step sighted. One small all-gather a step; every rank steps.
void DynamicTables::gather_stats() {
    std::vector<uint64_t> mine;
    for (const auto& t : tables_) {
        const DynamicTableStats st = t->stats();
        for (int64_t v : {st.rows, st.pending, st.admissions, st.evictions, st.bytes, st.map_slots})
            mine.push_back(static_cast<uint64_t>(v));
    }
    const size_t ids_at = mine.size();
    mine.push_back(static_cast<uint64_t>(ids_seen_));
    mine.push_back(static_cast<uint64_t>(ids_unadmitted_));
    if (options_.staleness > 0) mine.push_back(static_cast<uint64_t>(stale_dropped_));
    ids_seen_ = ids_unadmitted_ = stale_dropped_ = 0;
    // embedding.tier: this rank's step (a double's bits per word) and its cache rows.
    RowTierStats now;
    int64_t cache_rows = 0;
    for (const auto& t : tables_)
        if (const RowTier* tier = t->tier()) {
            now += tier->stats();
            cache_rows += tier->capacity();
        }
    const size_t tier_at = mine.size();
    if (tiered_) {
        for (double f : (now - tier_before_).to_array()) {
            uint64_t w = 0;
            std::memcpy(&w, &f, sizeof w);
            mine.push_back(w);
        }
        mine.push_back(static_cast<uint64_t>(cache_rows));
        tier_before_ = now;
    }
    const std::vector<uint64_t> all = all_words(mine);
    const size_t per = mine.size();
    std::vector<uint64_t> sum(per, 0);
    for (size_t r = 0; r * per < all.size(); ++r)
        for (size_t k = 0; k < tier_at; ++k) sum[k] += all[r * per + k];
    if (tiered_) {
        tier_step_ = {};
        tier_cache_rows_ = 0;
        for (size_t r = 0; r * per < all.size(); ++r) {
            std::array<double, RowTierStats::kFields> f{};
            std::memcpy(f.data(), all.data() + r * per + tier_at, sizeof f);
            const RowTierStats one = RowTierStats::from_array(f.data());
            const double slowest = std::max(tier_step_.stall_s, one.stall_s);
            tier_step_ += one;
            tier_step_.stall_s = slowest;  // the slowest rank's seconds, not the sum
            tier_cache_rows_ +=
                static_cast<int64_t>(all[r * per + tier_at + RowTierStats::kFields]);
        }
    }
    for (size_t i = 0; i < tables_.size(); ++i) {
        const uint64_t* f = sum.data() + i * 6;
        DynamicTableStats& g = group_stats_[i];
        g.rows = static_cast<int64_t>(f[0]);
        g.pending = static_cast<int64_t>(f[1]);
        g.admissions = static_cast<int64_t>(f[2]);
        g.evictions = static_cast<int64_t>(f[3]);
        g.bytes = static_cast<int64_t>(f[4]);
        g.load_factor = f[5] ? static_cast<double>(f[0]) / static_cast<double>(f[5]) : 0.0;
        global_rows_[i] = g.rows;
    }
    last_ids_seen_ = static_cast<int64_t>(sum[ids_at]);
    last_ids_unadmitted_ = static_cast<int64_t>(sum[ids_at + 1]);
    if (options_.staleness > 0) last_stale_dropped_ = static_cast<int64_t>(sum[ids_at + 2]);
}

void DynamicTables::zero_grads() {
    for (size_t i = 0; i < acc_.size(); ++i) {
        Acc& a = *acc_[i];
        for (int64_t s : a.slots) a.pos[static_cast<size_t>(s)] = -1;
        a.slots.clear();
        a.grads.clear();
        a.merged_slots.clear();
        a.merged.clear();
        a.default_grad.clear();
        a.merged_default = false;
        // Rows moved by evictions: the per-slot positions start over at the table's size.
        a.pos.assign(static_cast<size_t>(tables_[i]->rows()), -1);
    }
}

std::vector<std::string> DynamicTables::names() const {
    std::vector<std::string> out;
    for (const auto& t : tables_) out.push_back(t->options().name);
    return out;
}

Shape DynamicTables::shape(size_t i) const {
    return {comm_ ? global_rows_.at(i) : tables_.at(i)->rows(), tables_[i]->dim()};
}

int64_t DynamicTables::state_cols(size_t i) const { return tables_.at(i)->state_per_row(); }

int64_t DynamicTables::numel() const {
    int64_t n = 0;
    for (size_t i = 0; i < tables_.size(); ++i) n += shape(i)[0] * tables_[i]->dim();
    return n;
}

std::vector<uint64_t> DynamicTables::row_ids(size_t i) const { return gathered_ids_.at(i); }

// Collective: every rank's (id, row) pairs, merged in ascending id order (ids are distinct: each
// has one owner). Every rank gets them; the contract asks only root's.
std::vector<float> DynamicTables::gather(size_t i, int) {
    const DynamicTable& t = *tables_.at(i);
    const int64_t dim = t.dim();
    std::vector<uint64_t> mine;  // per row: id, then the row's bits (two floats per word)
    const auto words = static_cast<size_t>((dim + 1) / 2);
    std::vector<float> rows(static_cast<size_t>(t.rows() * dim));
    if (t.rows() > 0) t.read_range(0, t.rows(), rows.data());  // a tier's cache or store
    for (int64_t s = 0; s < t.rows(); ++s) {
        mine.push_back(t.id_of(s));
        std::vector<uint64_t> w(words, 0);
        std::memcpy(w.data(), rows.data() + s * dim, static_cast<size_t>(dim) * sizeof(float));
        mine.insert(mine.end(), w.begin(), w.end());
    }
    const std::vector<uint64_t> all = all_words(mine);
    const size_t per = 1 + words;
    std::vector<size_t> order(all.size() / per);
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return all[a * per] < all[b * per]; });
    std::vector<float> out(order.size() * static_cast<size_t>(dim));
    std::vector<uint64_t>& ids = gathered_ids_[i];
    ids.resize(order.size());
    for (size_t k = 0; k < order.size(); ++k) {
        ids[k] = all[order[k] * per];
        std::memcpy(out.data() + k * static_cast<size_t>(dim), all.data() + order[k] * per + 1,
                    static_cast<size_t>(dim) * sizeof(float));
    }
    global_rows_[i] = static_cast<int64_t>(ids.size());
    return out;
}

// Collective. An id evicted and then admitted again is a row, not a deletion; both happen on its
// owner, so the owner's check is enough.
std::vector<uint64_t> DynamicTables::take_deleted(size_t i) {
    DynamicTable& t = *tables_.at(i);
    std::vector<uint64_t> mine;
    for (uint64_t id : t.take_evicted())
        if (t.find(id) < 0) mine.push_back(id);
    std::vector<uint64_t> all = all_words(mine);
    std::sort(all.begin(), all.end());
    return all;
}

std::vector<float> DynamicTables::unadmitted_row(size_t i) const {
    const DynamicTable& t = *tables_.at(i);
    if (!t.default_row()) return {};
    return std::vector<float>(t.default_row(), t.default_row() + t.dim());
}

void DynamicTables::load(size_t i, const float*) {
    ZT_CHECK(false, "init_from: ", tables_.at(i)->options().name,
             " is a dynamic table, whose rows come from training (or a checkpoint), not from a "
             "weight file; start it empty or resume the run");
}

// One block per rank: rows [rank, rank + 1) of a layout of `col_end` ranks name the writer (the
// block's data is the table's state on that rank, Note [Dynamic table state]).
std::vector<SparseBlock> DynamicTables::blocks(size_t i) const {
    return {writer_block(tables_.at(i)->save())};
}

SparseBlock DynamicTables::writer_block(DynamicTable::Saved s) const {
    SparseBlock b;
    b.row_begin = rank_;
    b.row_end = rank_ + 1;
    b.col_begin = 0;
    b.col_end = ranks_;
    b.weights = std::move(s.weights);
    b.state = std::move(s.state);
    b.aux = std::move(s.words);
    return b;
}

void DynamicTables::track_changes(bool on) {
    for (auto& t : tables_) t->track_changes(on);
}

void DynamicTables::saved() {
    for (auto& t : tables_) t->mark_saved();
}

// The same writer's identity as blocks(): rows [rank, rank + 1) of col_end ranks.
std::vector<SparseBlock> DynamicTables::delta_blocks(size_t i) const {
    return {writer_block(tables_.at(i)->save_delta())};
}

void DynamicTables::apply_delta(size_t i, SparseBlock& base, const SparseBlock& delta) const {
    const DynamicTable& t = *tables_.at(i);
    ZT_CHECK(base.row_begin == delta.row_begin && base.col_end == delta.col_end,
             "checkpoint: ", t.options().name, ": an incremental block of rank ", delta.row_begin,
             " of ", delta.col_end, " applied to the block of rank ", base.row_begin, " of ",
             base.col_end);
    DynamicTable::Saved s{std::move(base.aux), std::move(base.weights), std::move(base.state)};
    t.apply_delta(s, {delta.aux, delta.weights, delta.state});
    base.aux = std::move(s.words);
    base.weights = std::move(s.weights);
    base.state = std::move(s.state);
}

// The same rank count: this rank's block only; another: every block (load_block keeps the ids
// this rank owns).
bool DynamicTables::overlaps(size_t, const SparseBlock& b) const {
    return b.col_end != ranks_ || b.row_begin == rank_;
}

void DynamicTables::load_block(size_t i, const SparseBlock& b) {
    DynamicTable& t = *tables_.at(i);
    ZT_CHECK(!b.aux.empty(), "checkpoint: ", t.options().name,
             " was written as a static table (no ids); this run makes it dynamic. Resume with "
             "the tables it was written with");
    if (b.col_end == ranks_) {
        t.restore({b.aux, b.weights, b.state});
    } else {  // resharding: the ids this rank owns now; the group's counters once, on rank 0
        t.merge(
            {b.aux, b.weights, b.state}, [this](uint64_t id) { return owner(id) == rank_; },
            rank_ == 0);
    }
    acc_[i]->pos.assign(static_cast<size_t>(t.rows()), -1);
}

void DynamicTables::on_tier_writeback(std::function<void()> hook) {
    for (auto& t : tables_)
        if (RowTier* tier = t->tier()) tier->on_writeback(hook);
}

std::vector<std::string> DynamicTables::describe() const {
    std::vector<std::string> lines;
    for (const auto& t : tables_) {
        const DynamicTableOptions& o = t->options();
        lines.push_back(str_cat(
            "embedding: ", o.name, " dynamic (dim ", o.dim, ", min_count ", o.min_count, ", ",
            o.evict_unseen_steps ? str_cat("evicted after ", o.evict_unseen_steps, " unseen steps")
                                 : std::string("no expiry"),
            ", max_rows ", o.max_rows ? std::to_string(o.max_rows) : std::string("none"), " by ",
            o.policy == EvictPolicy::kLru ? "LRU" : "LFU", ", unadmitted ids read ",
            o.unadmitted == UnadmittedRow::kZeros ? "zeros" : "a default row",
            "), updated by sparse ", sparse_optim_name(options_.optimizer.kind)));
    }
    if (tiered_) {
        const DynamicTierOptions& o = options_.tier;
        int64_t cache = 0;
        for (const auto& t : tables_) cache += t->tier()->capacity();
        lines.push_back(
            str_cat("embedding.tier: this rank's dynamic rows on ", o.device,
                    o.device == "nvme" ? str_cat(" (", o.nvme_path, ")") : std::string(),
                    " behind a ", row_cache_policy_name(o.policy), " cache of ",
                    options_.tier_cache_bytes > 0
                        ? str_cat(tables_.front()->options().tier.cache_rows, " rows a table")
                        : str_cat(o.cache_ratio, " of each table's slots (", cache, " rows now)"),
                    ", grown to hold the rows of a step"));
    }
    return lines;
}

nlohmann::json DynamicTables::plan_json() const {
    nlohmann::json tables = nlohmann::json::array();
    for (const auto& t : tables_) {
        const DynamicTableOptions& o = t->options();
        tables.push_back(
            {{"name", o.name},
             {"dim", o.dim},
             {"min_count", o.min_count},
             {"unseen_steps", o.evict_unseen_steps},
             {"max_rows", o.max_rows},
             {"policy", o.policy == EvictPolicy::kLru ? "lru" : "lfu"},
             {"unadmitted", o.unadmitted == UnadmittedRow::kZeros ? "zeros" : "default_row"}});
    }
    return {{"dynamic", tables}, {"optimizer", sparse_optim_name(options_.optimizer.kind)}};
}

nlohmann::json DynamicTables::step_counters() const {
    nlohmann::json tables = nlohmann::json::object();
    for (size_t i = 0; i < tables_.size(); ++i) {
        const DynamicTableStats& s = group_stats_[i];
        tables[tables_[i]->options().name] = {{"rows", s.rows},
                                              {"pending", s.pending},
                                              {"admissions", s.admissions},
                                              {"evictions", s.evictions},
                                              {"load_factor", s.load_factor},
                                              {"bytes", s.bytes}};
    }
    nlohmann::json j = {{"dynamic_tables", tables},
                        {"dynamic_ids", last_ids_seen_},
                        {"dynamic_ids_unadmitted", last_ids_unadmitted_}};
    if (options_.staleness > 0) j["stale_dropped"] = last_stale_dropped_;
    if (tiered_) {
        // embedding.tier (docs/embedding-tier.md): the step's fetches over the group.
        j["tier"] = tier_step_.metrics();
        j["tier"]["device"] = options_.tier.device;
        j["tier"]["policy"] = row_cache_policy_name(options_.tier.policy);
        j["tier"]["cache_rows"] = tier_cache_rows_;
    }
    return j;
}

}  // namespace zt
