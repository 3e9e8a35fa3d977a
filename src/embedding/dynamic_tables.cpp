#include "embedding/dynamic_tables.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "util/error.h"
#include "util/radix_sort.h"

namespace zt {

// One table's gradients of a step: per row slot, its position in `slots` (first touch order) or
// -1; after finish_grads, merged_slots / merged ascending by id (Note [Merge order] of
// ShardedTables on one rank: a row's micro-batch parts added in order into zero).
struct DynamicTables::Acc {
    std::vector<int64_t> pos;  // per slot
    std::vector<int64_t> slots;
    std::vector<float> grads;         // slots.size() x dim
    std::vector<float> default_grad;  // dim, when the default row was read
    std::vector<int64_t> merged_slots;
    std::vector<float> merged;
    bool merged_default = false;
};

// A lookup's rows, kept for its backward: per table, the compact table's Var and, per distinct
// id, its slot (-1: unadmitted).
struct DynamicTables::Lookup {
    std::vector<Var> compact;
    std::vector<std::vector<int64_t>> slots;
};

namespace {

// The raw id of a batch id: its 32 bits as stored (data/click files carry 32-bit ids).
uint64_t raw_id(int32_t id) { return static_cast<uint32_t>(id); }

}  // namespace

DynamicTables::DynamicTables(MemoryPool& pool, std::vector<DynamicTableOptions> tables,
                             std::vector<int> features, const DynamicTablesOptions& options)
    : pool_(pool),
      features_(std::move(features)),
      options_(options),
      optimizer_(options.optimizer) {
    ZT_ASSERT(tables.size() == features_.size(), "one feature per dynamic table");
    for (DynamicTableOptions& t : tables) {
        t.optimizer = options_.optimizer;
        tables_.push_back(std::make_unique<DynamicTable>(pool_, std::move(t)));
        acc_.push_back(std::make_unique<Acc>());
    }
}

DynamicTables::~DynamicTables() = default;

std::vector<Var> DynamicTables::lookup(Tape& tape, const ClickBatch& batch,
                                       std::span<const ops::BagPooling> pooling) {
    ZT_ASSERT(pooling.size() == tables_.size(), "one pooling per dynamic table");
    const bool train = tape.recording();
    auto lk = std::make_shared<Lookup>();
    const DType dt = options_.compute_dtype;
    const size_t esize = dtype_size(dt);
    const size_t nt = tables_.size();
    std::vector<std::vector<int32_t>> own_uniq(nt), own_index(nt);
    std::vector<std::span<const int32_t>> index(nt);
    std::vector<Var> compact(nt);
    std::vector<uint64_t> keys, tmp;
    for (size_t i = 0; i < nt; ++i) {
        DynamicTable& t = *tables_[i];
        const auto f = static_cast<size_t>(features_[i]);
        std::span<const int32_t> uniq;
        if (batch.distinct.size() == batch.ids.size() &&
            batch.distinct_index.size() == batch.ids.size()) {
            uniq = batch.distinct[f];
            index[i] = batch.distinct_index[f];
        } else {
            index_distinct(batch.ids[f], own_uniq[i], own_index[i], keys, tmp);
            uniq = own_uniq[i];
            index[i] = own_index[i];
        }
        const auto U = static_cast<int64_t>(uniq.size());
        const int64_t dim = t.dim();
        std::vector<int64_t> slots(static_cast<size_t>(U));
        for (int64_t u = 0; u < U; ++u) {
            const uint64_t id = raw_id(uniq[static_cast<size_t>(u)]);
            slots[static_cast<size_t>(u)] = train ? t.see(id) : t.find(id);
        }
        // (U, dim) rows in the compute dtype: the row, the default row, or zeros.
        Tensor rows = Tensor::empty(tape.pool(), {U, dim}, dt, MemCategory::kActivations);
        auto* base = static_cast<char*>(rows.raw());
        const std::vector<float> zeros(static_cast<size_t>(dim), 0.0f);
        int64_t unadmitted = 0;
        for (int64_t u = 0; u < U; ++u) {
            const int64_t s = slots[static_cast<size_t>(u)];
            const float* src = s >= 0 ? t.row(s) : t.default_row();
            if (s < 0) ++unadmitted;
            convert(src ? src : zeros.data(), DType::kF32,
                    base + static_cast<size_t>(u * dim) * esize, dt, static_cast<size_t>(dim));
        }
        if (!train) {
            compact[i] = make_var(rows);
            continue;
        }
        ids_seen_ += U;
        ids_unadmitted_ += unadmitted;
        compact[i] = make_var(rows, true);
        compact[i]->grad =
            Tensor::zeros(tape.pool(), rows.shape(), DType::kF32, MemCategory::kActivations);
        lk->compact.push_back(compact[i]);
        lk->slots.push_back(std::move(slots));
    }
    // Pushed before the pooling ops, so that it runs after all of their backwards.
    if (train) tape.push("dynamic_embedding_rows", [this, lk] { backward(*lk); });
    std::vector<Var> out;
    for (size_t i = 0; i < nt; ++i) {
        const auto f = static_cast<size_t>(features_[i]);
        out.push_back(ops::embedding_bag(tape, compact[i], index[i], batch.offsets[f],
                                         batch.weights[f], pooling[i]));
    }
    return out;
}

// Each distinct row's gradient (summed from zero over its positions by embedding_bag's
// backward) is added into the row's step accumulator; the unadmitted ids' gradients, ascending
// by id, into a part from zero that is added into the default row's.
void DynamicTables::backward(Lookup& lk) {
    for (size_t i = 0; i < lk.compact.size(); ++i) {
        DynamicTable& t = *tables_[i];
        Acc& a = *acc_[i];
        const int64_t dim = t.dim();
        const float* g = lk.compact[i]->grad.data<float>();
        const std::vector<int64_t>& slots = lk.slots[i];
        std::vector<float> part;
        if (a.pos.size() < static_cast<size_t>(t.rows()))
            a.pos.resize(static_cast<size_t>(t.rows()), -1);
        for (size_t u = 0; u < slots.size(); ++u) {
            const float* gu = g + static_cast<int64_t>(u) * dim;
            const int64_t s = slots[u];
            if (s < 0) {
                if (!t.default_row()) continue;  // zeros: nothing to train
                if (part.empty()) part.assign(static_cast<size_t>(dim), 0.0f);
                for (int64_t c = 0; c < dim; ++c) part[static_cast<size_t>(c)] += gu[c];
                continue;
            }
            int64_t& p = a.pos[static_cast<size_t>(s)];
            if (p < 0) {
                p = static_cast<int64_t>(a.slots.size());
                a.slots.push_back(s);
                a.grads.resize(a.grads.size() + static_cast<size_t>(dim), 0.0f);
            }
            float* dst = a.grads.data() + p * dim;
            for (int64_t c = 0; c < dim; ++c) dst[c] += gu[c];
        }
        if (!part.empty()) {
            if (a.default_grad.empty()) a.default_grad.assign(static_cast<size_t>(dim), 0.0f);
            for (int64_t c = 0; c < dim; ++c)
                a.default_grad[static_cast<size_t>(c)] += part[static_cast<size_t>(c)];
        }
    }
    lk.compact.clear();
}

void DynamicTables::finish_grads() {
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
        a.merged_default = !a.default_grad.empty();
        a.slots.clear();
        a.grads.clear();
    }
    last_ids_seen_ = ids_seen_;
    last_ids_unadmitted_ = ids_unadmitted_;
    ids_seen_ = ids_unadmitted_ = 0;
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
        if (a.merged_default) sum += row_sq(a.default_grad.data());
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
        DynamicTable& t = *tables_[i];
        Acc& a = *acc_[i];
        if (!a.merged_slots.empty()) {
            SparseRowStorage w = t.storage();
            optimizer_.step(w, t.state(), a.merged_slots, a.merged.data(), static_cast<float>(rate),
                            update);
        }
        if (a.merged_default) {
            SparseRowStorage w = t.default_storage();
            const int64_t zero = 0;
            optimizer_.step(w, t.default_state(), std::span<const int64_t>(&zero, 1),
                            a.default_grad.data(), static_cast<float>(rate), update);
        }
        t.end_step();  // evictions: after the update, so no gradient is pending
    }
    zero_grads();
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

Shape DynamicTables::shape(size_t i) const { return {tables_.at(i)->rows(), tables_[i]->dim()}; }

int64_t DynamicTables::state_cols(size_t i) const { return tables_.at(i)->state_per_row(); }

int64_t DynamicTables::numel() const {
    int64_t n = 0;
    for (const auto& t : tables_) n += t->rows() * t->dim();
    return n;
}

std::vector<uint64_t> DynamicTables::row_ids(size_t i) const {
    const DynamicTable& t = *tables_.at(i);
    std::vector<uint64_t> out(static_cast<size_t>(t.rows()));
    for (int64_t s = 0; s < t.rows(); ++s) out[static_cast<size_t>(s)] = t.id_of(s);
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<float> DynamicTables::gather(size_t i, int) {
    const DynamicTable& t = *tables_.at(i);
    const int64_t dim = t.dim();
    std::vector<float> out;
    out.reserve(static_cast<size_t>(t.rows() * dim));
    for (uint64_t id : row_ids(i)) {
        const float* r = t.row(t.find(id));
        out.insert(out.end(), r, r + dim);
    }
    return out;
}

std::vector<uint64_t> DynamicTables::take_deleted(size_t i) {
    DynamicTable& t = *tables_.at(i);
    std::vector<uint64_t> out;
    for (uint64_t id : t.take_evicted())
        if (t.find(id) < 0) out.push_back(id);  // evicted, then admitted again: a row now
    return out;
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

std::vector<SparseBlock> DynamicTables::blocks(size_t i) const {
    const DynamicTable& t = *tables_.at(i);
    DynamicTable::Saved s = t.save();
    SparseBlock b;
    b.row_begin = 0;
    b.row_end = t.rows();
    b.col_begin = 0;
    b.col_end = t.dim();
    b.weights = std::move(s.weights);
    b.state = std::move(s.state);
    b.aux = std::move(s.words);
    return {b};
}

void DynamicTables::load_block(size_t i, const SparseBlock& b) {
    DynamicTable& t = *tables_.at(i);
    ZT_CHECK(!b.aux.empty(), "checkpoint: ", t.options().name,
             " was written as a static table (no ids); this run makes it dynamic. Resume with "
             "the tables it was written with");
    t.restore({b.aux, b.weights, b.state});
    acc_[i]->pos.assign(static_cast<size_t>(t.rows()), -1);
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
    for (const auto& t : tables_) {
        const DynamicTableStats s = t->stats();
        tables[t->options().name] = {{"rows", s.rows},
                                     {"pending", s.pending},
                                     {"admissions", s.admissions},
                                     {"evictions", s.evictions},
                                     {"load_factor", s.load_factor},
                                     {"bytes", s.bytes}};
    }
    return {{"dynamic_tables", tables},
            {"dynamic_ids", last_ids_seen_},
            {"dynamic_ids_unadmitted", last_ids_unadmitted_}};
}

}  // namespace zt
