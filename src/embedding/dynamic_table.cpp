#include "embedding/dynamic_table.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "util/error.h"
#include "util/random.h"

namespace zt {

// Note [Admission]
// Ids wait in an exact counting map (id -> sightings, last step seen) until their min_count-th
// sighting, when they become rows. Exact rather than a count-min sketch: a sketch's collisions
// would admit ids that were never seen min_count times, and "no collisions" is the point of these
// tables; the price is 32 bytes per pending id instead of a fixed sketch. Pending ids unseen for
// evict_unseen_steps steps are forgotten with the rows, which bounds the map by the ids of the
// last S steps; without S it holds every id seen fewer than min_count times (say so in the docs).
// A sighting is a micro-batch whose bags hold the id (callers deduplicate), so min_count counts
// micro-batches, not occurrences within one.
//
// Note [Eviction]
// At the end of step t (counted from 0), first every row with t - last_seen >= S leaves (S > 0),
// then, past max_rows R, the rows that sort first leave until R remain: LRU by (last step seen,
// id), LFU by (sightings, last step seen, id). The id breaks every tie, so the rows that leave do
// not depend on slots, threads or the layout. Within a step the table may hold R plus the step's
// admissions. The last row moves into an evicted row's slot, so rows stay dense: the rows that
// move are the newest (on a tier, usually still in its cache, so a move is a rename there: Note
// [Growing tier] in row_tier_grow.cpp), and the slots, the checkpoints and their increments are
// the same whether the rows are in memory or on a tier.
//
// Note [Dynamic table state]
// save() writes words (u64): version 1, rows n, pending p, evicted e, step, admissions, evictions,
// has default row; then n ids, n last-seen steps, n counts, p pending ids, p pending counts,
// p pending last-seen steps, e evicted ids. weights: the n rows in slot order, then the default
// row (dim) when there is one; state likewise. Slots are restored as saved, so a resumed run
// continues with the same bits. Incremental checkpoints write version 2 instead, what changed
// since the last mark (Note [Incremental table state], dynamic_table_delta.cpp).

namespace {

constexpr int64_t kMinCapacity = 64;  // rows allocated at first

}  // namespace

DynamicTable::DynamicTable(MemoryPool& pool, DynamicTableOptions options)
    : pool_(pool),
      options_(std::move(options)),
      state_cols_(sparse_state_per_row(options_.optimizer.kind, options_.dim)) {
    ZT_CHECK(options_.dim > 0, "dynamic table ", options_.name, ": dim must be positive, got ",
             options_.dim);
    ZT_CHECK(options_.min_count >= 1, "dynamic table ", options_.name,
             ": min_count must be at least 1, got ", options_.min_count);
    ZT_CHECK(options_.evict_unseen_steps >= 0 && options_.max_rows >= 0, "dynamic table ",
             options_.name, ": evict.unseen_steps and evict.max_rows must be >= 0");
    rows_ = make_dynamic_rows(pool_, options_.name, options_.dim, state_cols_, kMinCapacity,
                              options_.tier);
    capacity_ = kMinCapacity;
    if (options_.unadmitted == UnadmittedRow::kDefaultRow) {
        MemScope scope(pool_, options_.name, MemPhase::kOther);
        default_w_ = Tensor::empty(pool_, {1, options_.dim}, DType::kF32, MemCategory::kEmbedding);
        // The default row draws from its own stream: it is no id's row.
        const uint64_t stream = hash_string(options_.name + ".default");
        float* d = default_w_.data<float>();
        for (int64_t c = 0; c < options_.dim; ++c)
            d[c] = param_init_value(options_.init, options_.seed, stream, c);
        if (state_cols_ > 0) {
            default_s_ =
                Tensor::empty(pool_, {1, state_cols_}, DType::kF32, MemCategory::kEmbedding);
            std::fill_n(default_s_.data<float>(), state_cols_,
                        sparse_state_initial(options_.optimizer));
        }
    }
}

void DynamicTable::grow(int64_t rows) {
    if (rows <= capacity_) return;
    int64_t cap = std::max(kMinCapacity, capacity_);
    while (cap < rows) cap *= 2;
    rows_->grow(cap, this->rows());
    capacity_ = cap;
}

const float* DynamicTable::row(int64_t slot) const {
    ZT_ASSERT(!tier(), "DynamicTable::row: the rows are on a tier; fetch or read them");
    return rows_->row(slot);
}

// Element c of id's row is element id * dim + c of a (2^64 / dim, dim) table: a static table over
// the same ids with the same init starts with the same rows.
void DynamicTable::init_row(uint64_t id, float* dst) const {
    const uint64_t stream = hash_string(options_.name);
    const auto dim = static_cast<uint64_t>(options_.dim);
    for (uint64_t c = 0; c < dim; ++c)
        dst[c] = param_init_value(options_.init, options_.seed, stream,
                                  static_cast<int64_t>(id * dim + c));
}

int64_t DynamicTable::admit(uint64_t id, int64_t count) {
    const int64_t slot = rows();
    grow(slot + 1);
    ids_.push_back(id);
    last_seen_.push_back(step_);
    count_.push_back(count);
    changed_.push_back(1);
    index_.insert(id, slot);
    std::vector<float> w(static_cast<size_t>(options_.dim));
    init_row(id, w.data());
    rows_->init(slot, w.data(), sparse_state_initial(options_.optimizer));
    ++admissions_;
    return slot;
}

int64_t DynamicTable::see(uint64_t id) {
    const int64_t slot = index_.find(id);
    if (slot >= 0) {
        last_seen_[static_cast<size_t>(slot)] = step_;
        ++count_[static_cast<size_t>(slot)];
        changed_[static_cast<size_t>(slot)] = 1;  // its values change in this step's update
        return slot;
    }
    if (options_.min_count <= 1) return admit(id, 1);
    const int64_t p = pending_index_.find(id);
    if (p < 0) {
        pending_index_.insert(id, static_cast<int64_t>(pending_ids_.size()));
        pending_ids_.push_back(id);
        pending_count_.push_back(1);
        pending_seen_.push_back(step_);
        return -1;
    }
    const int64_t count = ++pending_count_[static_cast<size_t>(p)];
    pending_seen_[static_cast<size_t>(p)] = step_;
    if (count < options_.min_count) return -1;
    remove_pending(p);
    return admit(id, count);
}

void DynamicTable::remove_pending(int64_t i) {
    const auto u = static_cast<size_t>(i);
    pending_index_.erase(pending_ids_[u]);
    const size_t last = pending_ids_.size() - 1;
    if (u != last) {
        pending_ids_[u] = pending_ids_[last];
        pending_count_[u] = pending_count_[last];
        pending_seen_[u] = pending_seen_[last];
        pending_index_.set(pending_ids_[u], i);
    }
    pending_ids_.pop_back();
    pending_count_.pop_back();
    pending_seen_.pop_back();
}

void DynamicTable::remove_row(int64_t slot, std::unordered_map<int64_t, int64_t>& origin,
                              std::vector<int64_t>& dropped) {
    const auto u = static_cast<size_t>(slot);
    index_.erase(ids_[u]);
    evicted_.push_back(ids_[u]);
    if (track_) left_.push_back(ids_[u]);
    ++evictions_;
    auto from = [&](int64_t s) {
        const auto it = origin.find(s);
        return it == origin.end() ? s : it->second;
    };
    dropped.push_back(from(slot));
    const int64_t last = rows() - 1;
    if (slot != last) {
        const auto l = static_cast<size_t>(last);
        ids_[u] = ids_[l];
        last_seen_[u] = last_seen_[l];
        count_[u] = count_[l];
        changed_[u] = 1;  // moved: a delta writes it at its new slot
        origin[slot] = from(last);
        index_.set(ids_[u], slot);
    }
    origin.erase(last);
    ids_.pop_back();
    last_seen_.pop_back();
    count_.pop_back();
    changed_.pop_back();
}

std::vector<uint64_t> DynamicTable::end_step() {
    rows_->end_step();  // the step's update has run
    const int64_t t = step_;
    const int64_t S = options_.evict_unseen_steps;
    std::vector<uint64_t> leave;
    if (S > 0) {
        for (size_t i = 0; i < ids_.size(); ++i)
            if (t - last_seen_[i] >= S) leave.push_back(ids_[i]);
        for (int64_t i = static_cast<int64_t>(pending_ids_.size()) - 1; i >= 0; --i)
            if (t - pending_seen_[static_cast<size_t>(i)] >= S) remove_pending(i);
    }
    const int64_t R = options_.max_rows;
    const int64_t after_unseen = rows() - static_cast<int64_t>(leave.size());
    if (R > 0 && after_unseen > R) {
        std::vector<int64_t> order;  // slots still here, in eviction order
        for (size_t i = 0; i < ids_.size(); ++i)
            if (S == 0 || t - last_seen_[i] < S) order.push_back(static_cast<int64_t>(i));
        const bool lfu = options_.policy == EvictPolicy::kLfu;
        auto key = [&](int64_t s) {
            const auto u = static_cast<size_t>(s);
            return std::make_tuple(lfu ? count_[u] : 0, last_seen_[u], ids_[u]);
        };
        const auto n = static_cast<size_t>(after_unseen - R);
        std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n),
                          order.end(), [&](int64_t a, int64_t b) { return key(a) < key(b); });
        for (size_t i = 0; i < n; ++i) leave.push_back(ids_[static_cast<size_t>(order[i])]);
    }
    std::sort(leave.begin(), leave.end());  // a fixed order of removal: slots as one process has
    std::unordered_map<int64_t, int64_t> origin;
    std::vector<int64_t> dropped;
    for (uint64_t id : leave) remove_row(index_.find(id), origin, dropped);
    // Rows only move from the tail into holes below rows(), so sources and targets are apart.
    std::vector<std::pair<int64_t, int64_t>> moves;
    for (const auto& [to, from] : origin) {
        ZT_ASSERT(to < rows() && from >= rows(), "dynamic table: a move ", from, " -> ", to,
                  " inside the rows");
        moves.emplace_back(from, to);
    }
    std::sort(moves.begin(), moves.end(),
              [](const auto& a, const auto& b) { return a.second < b.second; });
    if (!dropped.empty()) rows_->compact(dropped, moves);
    ++step_;
    return leave;
}

std::vector<uint64_t> DynamicTable::take_evicted() {
    std::vector<uint64_t> out = std::move(evicted_);
    evicted_.clear();
    log_kept_ = 0;  // the log now starts after the ids that left so far
    log_from_ = static_cast<int64_t>(left_.size());
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

SparseRowStorage DynamicTable::storage() {
    auto* m = dynamic_cast<MemoryRows*>(rows_.get());
    ZT_ASSERT(m, "DynamicTable::storage: the rows are on a tier");
    SparseRowStorage s = m->storage();
    s.rows = rows();
    return s;
}

float* DynamicTable::state() {
    auto* m = dynamic_cast<MemoryRows*>(rows_.get());
    ZT_ASSERT(m, "DynamicTable::state: the rows are on a tier");
    return m->state();
}

const float* DynamicTable::default_row() const {
    return default_w_.defined() ? default_w_.data<float>() : nullptr;
}

SparseRowStorage DynamicTable::default_storage() {
    SparseRowStorage s;
    s.rows = 1;
    s.cols = options_.dim;
    s.f32 = default_w_.data<float>();
    return s;
}

float* DynamicTable::default_state() {
    return default_s_.defined() ? default_s_.data<float>() : nullptr;
}

DynamicTableStats DynamicTable::stats() const {
    DynamicTableStats st;
    st.rows = rows();
    st.pending = static_cast<int64_t>(pending_ids_.size());
    st.admissions = admissions_;
    st.evictions = evictions_;
    st.load_factor = index_.load_factor();
    st.map_slots = index_.capacity();
    st.bytes = rows_->bytes() + index_.bytes() + pending_index_.bytes() +
               static_cast<int64_t>(ids_.capacity()) * 24 +
               static_cast<int64_t>(pending_ids_.capacity()) * 24 +
               static_cast<int64_t>(evicted_.capacity()) * 8 +
               static_cast<int64_t>(changed_.capacity() + left_.capacity() * 8);
    return st;
}

DynamicTable::Saved DynamicTable::save() const {
    Saved s;
    const int64_t n = rows(), p = static_cast<int64_t>(pending_ids_.size());
    const bool def = default_w_.defined();
    auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
    s.words = {
        kSaveVersion, u(n),           u(p),          u(static_cast<int64_t>(evicted_.size())),
        u(step_),     u(admissions_), u(evictions_), def ? 1u : 0u};
    s.words.insert(s.words.end(), ids_.begin(), ids_.end());
    for (int64_t v : last_seen_) s.words.push_back(u(v));
    for (int64_t v : count_) s.words.push_back(u(v));
    s.words.insert(s.words.end(), pending_ids_.begin(), pending_ids_.end());
    for (int64_t v : pending_count_) s.words.push_back(u(v));
    for (int64_t v : pending_seen_) s.words.push_back(u(v));
    s.words.insert(s.words.end(), evicted_.begin(), evicted_.end());
    const int64_t d = options_.dim;
    s.weights.resize(static_cast<size_t>(n * d));
    s.state.resize(static_cast<size_t>(n * state_cols_));
    if (n > 0) rows_->read_range(0, n, s.weights.data(), s.state.data());
    if (def) s.weights.insert(s.weights.end(), default_row(), default_row() + d);
    if (state_cols_ > 0) {
        if (def)
            s.state.insert(s.state.end(), default_s_.data<float>(),
                           default_s_.data<float>() + state_cols_);
    }
    return s;
}

DynamicTable::View DynamicTable::view(const Saved& s) const {
    const std::string& name = options_.name;
    ZT_CHECK(!is_delta(s.words), "dynamic table ", name,
             ": an incremental checkpoint block read without its base (apply_delta)");
    ZT_CHECK(s.words.size() >= kSaveHeader && s.words[0] == kSaveVersion, "dynamic table ", name,
             ": a checkpoint block of an unknown format (version ",
             s.words.empty() ? 0 : s.words[0], ", this build reads ", kSaveVersion, ")");
    View v;
    v.n = static_cast<int64_t>(s.words[1]);
    v.p = static_cast<int64_t>(s.words[2]);
    v.e = static_cast<int64_t>(s.words[3]);
    v.def = s.words[7] != 0;
    const int64_t d = options_.dim;
    ZT_CHECK(v.def == default_w_.defined(), "dynamic table ", name,
             ": the checkpoint was written with unadmitted \"", v.def ? "default_row" : "zeros",
             "\"; resume with the same setting");
    ZT_CHECK(v.n >= 0 && v.p >= 0 && v.e >= 0 &&
                 static_cast<int64_t>(s.words.size()) == kSaveHeader + 3 * v.n + 3 * v.p + v.e &&
                 static_cast<int64_t>(s.weights.size()) == (v.n + (v.def ? 1 : 0)) * d &&
                 static_cast<int64_t>(s.state.size()) == (v.n + (v.def ? 1 : 0)) * state_cols_,
             "dynamic table ", name, ": a checkpoint block whose sizes do not match (", v.n,
             " rows of dim ", d, " with ", state_cols_,
             " state values each); resume with the dim and optimizer it was written with");
    const uint64_t* w = s.words.data() + kSaveHeader;
    v.ids = w;
    v.seen = w + v.n;
    v.count = w + 2 * v.n;
    v.pending = w + 3 * v.n;
    v.pending_count = v.pending + v.p;
    v.pending_seen = v.pending + 2 * v.p;
    v.evicted = v.pending + 3 * v.p;
    return v;
}

void DynamicTable::restore(const Saved& s) {
    const View v = view(s);
    const int64_t n = v.n, p = v.p, d = options_.dim;
    step_ = static_cast<int64_t>(s.words[4]);
    admissions_ = static_cast<int64_t>(s.words[5]);
    evictions_ = static_cast<int64_t>(s.words[6]);
    ids_.clear();  // rows() is 0 while the storage grows: nothing of the old rows is copied
    rows_->clear();
    grow(n);
    ids_.assign(v.ids, v.ids + n);
    last_seen_.assign(v.seen, v.seen + n);
    count_.assign(v.count, v.count + n);
    pending_ids_.assign(v.pending, v.pending + p);
    pending_count_.assign(v.pending_count, v.pending_count + p);
    pending_seen_.assign(v.pending_seen, v.pending_seen + p);
    evicted_.assign(v.evicted, v.evicted + v.e);
    index_.clear();
    index_.reserve(n);
    for (int64_t i = 0; i < n; ++i) index_.insert(ids_[static_cast<size_t>(i)], i);
    pending_index_.clear();
    pending_index_.reserve(p);
    for (int64_t i = 0; i < p; ++i) pending_index_.insert(pending_ids_[static_cast<size_t>(i)], i);
    if (n > 0) rows_->write_range(0, n, s.weights.data(), s.state.data());
    if (v.def) {
        std::memcpy(default_w_.raw(), s.weights.data() + n * d, static_cast<size_t>(d) * 4);
        if (state_cols_ > 0)
            std::memcpy(default_s_.raw(), s.state.data() + n * state_cols_,
                        static_cast<size_t>(state_cols_) * 4);
    }
    mark_saved();
}

void DynamicTable::merge(const Saved& s, const std::function<bool(uint64_t)>& keep, bool counters) {
    const View v = view(s);
    const int64_t d = options_.dim;
    step_ = static_cast<int64_t>(s.words[4]);
    if (counters) {
        admissions_ += static_cast<int64_t>(s.words[5]);
        evictions_ += static_cast<int64_t>(s.words[6]);
    }
    const int64_t n0 = rows();
    std::vector<float> w, st;  // the rows kept, written at [n0, rows()) below
    for (int64_t i = 0; i < v.n; ++i) {
        if (!keep(v.ids[i])) continue;
        ZT_CHECK(index_.find(v.ids[i]) < 0, "dynamic table ", options_.name, ": id ", v.ids[i],
                 " is in two blocks of the checkpoint");
        const int64_t slot = rows();
        grow(slot + 1);
        ids_.push_back(v.ids[i]);
        last_seen_.push_back(static_cast<int64_t>(v.seen[i]));
        count_.push_back(static_cast<int64_t>(v.count[i]));
        changed_.push_back(0);
        index_.insert(v.ids[i], slot);
        w.insert(w.end(), s.weights.data() + i * d, s.weights.data() + (i + 1) * d);
        st.insert(st.end(), s.state.data() + i * state_cols_,
                  s.state.data() + (i + 1) * state_cols_);
    }
    if (rows() > n0) rows_->write_range(n0, rows() - n0, w.data(), st.data());
    for (int64_t i = 0; i < v.p; ++i) {
        if (!keep(v.pending[i])) continue;
        pending_index_.insert(v.pending[i], static_cast<int64_t>(pending_ids_.size()));
        pending_ids_.push_back(v.pending[i]);
        pending_count_.push_back(static_cast<int64_t>(v.pending_count[i]));
        pending_seen_.push_back(static_cast<int64_t>(v.pending_seen[i]));
    }
    for (int64_t i = 0; i < v.e; ++i)
        if (keep(v.evicted[i])) evicted_.push_back(v.evicted[i]);
    if (v.def) {  // every rank's replica is the same
        std::memcpy(default_w_.raw(), s.weights.data() + v.n * d, static_cast<size_t>(d) * 4);
        if (state_cols_ > 0)
            std::memcpy(default_s_.raw(), s.state.data() + v.n * state_cols_,
                        static_cast<size_t>(state_cols_) * 4);
    }
    mark_saved();
}

}  // namespace zt
