// DynamicRows: see dynamic_rows.h.
#include "embedding/dynamic_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "offload/host_store.h"
#include "offload/nvme_store.h"
#include "offload/segmented_store.h"
#include "util/error.h"

namespace zt {

MemoryRows::MemoryRows(MemoryPool& pool, std::string name, int64_t dim, int64_t state_cols)
    : pool_(pool), name_(std::move(name)), dim_(dim), sc_(state_cols) {}

void MemoryRows::grow(int64_t slots, int64_t live) {
    if (slots <= capacity_) return;
    MemScope scope(pool_, name_, MemPhase::kOther);
    Tensor w = Tensor::empty(pool_, {slots, dim_}, DType::kF32, MemCategory::kEmbedding);
    if (w_.defined()) std::memcpy(w.raw(), w_.raw(), static_cast<size_t>(live * dim_) * 4);
    w_ = std::move(w);
    if (sc_ > 0) {
        Tensor s = Tensor::empty(pool_, {slots, sc_}, DType::kF32, MemCategory::kEmbedding);
        if (s_.defined()) std::memcpy(s.raw(), s_.raw(), static_cast<size_t>(live * sc_) * 4);
        s_ = std::move(s);
    }
    capacity_ = slots;
}

void MemoryRows::init(int64_t slot, const float* w, float state_value) {
    std::memcpy(w_.data<float>() + slot * dim_, w, static_cast<size_t>(dim_) * 4);
    if (sc_ > 0) std::fill_n(s_.data<float>() + slot * sc_, sc_, state_value);
}

void MemoryRows::fetch(std::span<const int64_t> slots, int64_t* handles) {
    std::copy(slots.begin(), slots.end(), handles);
}

void MemoryRows::read(std::span<const int64_t> slots, float* w, float* state) {
    for (size_t i = 0; i < slots.size(); ++i) {
        std::memcpy(w + static_cast<int64_t>(i) * dim_, row(slots[i]),
                    static_cast<size_t>(dim_) * 4);
        if (state && sc_ > 0)
            std::memcpy(state + static_cast<int64_t>(i) * sc_, s_.data<float>() + slots[i] * sc_,
                        static_cast<size_t>(sc_) * 4);
    }
}

void MemoryRows::read_range(int64_t s0, int64_t n, float* w, float* state) {
    std::memcpy(w, row(s0), static_cast<size_t>(n * dim_) * 4);
    if (state && sc_ > 0)
        std::memcpy(state, s_.data<float>() + s0 * sc_, static_cast<size_t>(n * sc_) * 4);
}

void MemoryRows::write_range(int64_t s0, int64_t n, const float* w, const float* state) {
    std::memcpy(w_.data<float>() + s0 * dim_, w, static_cast<size_t>(n * dim_) * 4);
    if (state && sc_ > 0)
        std::memcpy(s_.data<float>() + s0 * sc_, state, static_cast<size_t>(n * sc_) * 4);
}

void MemoryRows::update(const SparseRowOptimizer& opt, std::span<const int64_t> slots,
                        const float* grads, float lr, int64_t update) {
    SparseRowStorage w = storage();
    opt.step(w, state(), slots, grads, lr, update);
}

void MemoryRows::compact(std::span<const int64_t>,
                         std::span<const std::pair<int64_t, int64_t>> moves) {
    for (const auto& [from, to] : moves)
        write_range(to, 1, row(from), state() ? state() + from * sc_ : nullptr);
}

SparseRowStorage MemoryRows::storage() {
    SparseRowStorage s;
    s.rows = capacity_;
    s.cols = dim_;
    s.f32 = w_.data<float>();
    return s;
}

namespace {

constexpr uint64_t kFirstSegmentBytes = uint64_t{1} << 20;  // 1 MiB

// One segment of a dynamic table's store: host memory, or a swap file under nvme_path.
std::unique_ptr<Store> make_segment(const DynamicTierOptions& o, uint64_t bytes, int index) {
    return make_row_store(o.device, o.nvme_path, o.queue_depth, str_cat(o.file_name, "-", index),
                          bytes);
}

}  // namespace

TieredRows::TieredRows(MemoryPool& pool, std::string name, int64_t dim, int64_t state_cols,
                       int64_t slots, const DynamicTierOptions& options)
    : dim_(dim), sc_(state_cols), options_(options) {
    ZT_ASSERT(options_.cache_ratio > 0 || options_.cache_rows > 0, "a tier without a cache");
    // The first segment 1 MiB at least, then each as large as all before (Note [Growing tier]):
    // a table of a million rows takes a few files, not one per doubling of 64 slots.
    const auto page = static_cast<uint64_t>(RowTier::page_bytes(dim, state_cols));
    const uint64_t first = std::max(RowTier::store_bytes(slots, dim, state_cols),
                                    (kFirstSegmentBytes + page - 1) / page * page);
    auto store = std::make_unique<SegmentedStore>(
        [o = options_](uint64_t bytes, int index) { return make_segment(o, bytes, index); }, first);
    store_ = store.get();
    tier_ = std::make_unique<RowTier>(pool, name, slots, dim, state_cols, cache_for(slots),
                                      options_.policy, std::move(store));
    tier_->grow_cache_when_full(true);
}

TieredRows::~TieredRows() = default;

int64_t TieredRows::cache_for(int64_t slots) const {
    const int64_t want =
        options_.cache_rows > 0
            ? options_.cache_rows
            : static_cast<int64_t>(std::ceil(static_cast<double>(slots) * options_.cache_ratio));
    return std::clamp<int64_t>(want, 1, slots);
}

void TieredRows::grow(int64_t slots, int64_t) {
    if (slots <= tier_->rows()) return;
    const uint64_t need = RowTier::store_bytes(slots, dim_, sc_);
    if (need > store_->capacity()) store_->grow(std::max(need, 2 * store_->capacity()));
    tier_->grow_rows(slots);
    tier_->grow_cache(cache_for(slots));
}

int64_t TieredRows::bytes() const {
    // The cache, its row map (16 bytes a slot at most load) and per-slot bookkeeping.
    return tier_->cache_bytes() + tier_->capacity() * 48 +
           static_cast<int64_t>(fresh_.capacity() * sizeof(float));
}

void TieredRows::init(int64_t slot, const float* w, float state_value) {
    const int64_t rec = dim_ + sc_;
    const auto n = static_cast<int64_t>(fresh_.size()) / rec;
    if (n > 0 && slot != fresh_first_ + n) flush_fresh();
    if (fresh_.empty()) fresh_first_ = slot;
    fresh_.insert(fresh_.end(), w, w + dim_);
    fresh_.insert(fresh_.end(), static_cast<size_t>(sc_), state_value);
}

void TieredRows::flush_fresh() {
    if (fresh_.empty()) return;
    const int64_t rec = dim_ + sc_;
    const auto n = static_cast<int64_t>(fresh_.size()) / rec;
    std::vector<float> w(static_cast<size_t>(n * dim_)), st(static_cast<size_t>(n * sc_));
    for (int64_t i = 0; i < n; ++i) {
        std::copy_n(fresh_.data() + i * rec, dim_, w.data() + i * dim_);
        std::copy_n(fresh_.data() + i * rec + dim_, sc_, st.data() + i * sc_);
    }
    fresh_.clear();
    tier_->write_range(fresh_first_, n, w.data(), sc_ > 0 ? st.data() : nullptr);
}

void TieredRows::fetch(std::span<const int64_t> slots, int64_t* handles) {
    const int64_t rec = dim_ + sc_;
    const auto n = static_cast<int64_t>(fresh_.size()) / rec;
    flags_.assign(slots.size(), 0);
    for (size_t i = 0; i < slots.size(); ++i)
        flags_[i] = slots[i] >= fresh_first_ && slots[i] < fresh_first_ + n;
    tier_->fetch(slots, handles, flags_);
    // The new rows into their cache slots (dirty: fetch marked them), once each.
    float* cw = tier_->cache_storage().f32;
    float* cs = tier_->cache_state();
    std::vector<uint8_t> done(static_cast<size_t>(n), 0);
    int64_t left = n;
    for (size_t i = 0; i < slots.size(); ++i) {
        if (!flags_[i]) continue;
        const auto k = static_cast<size_t>(slots[i] - fresh_first_);
        if (done[k]) continue;
        done[k] = 1;
        --left;
        const float* r = fresh_.data() + static_cast<int64_t>(k) * rec;
        std::copy_n(r, dim_, cw + handles[i] * dim_);
        if (sc_ > 0) std::copy_n(r + dim_, sc_, cs + handles[i] * sc_);
    }
    // New rows this fetch did not ask for (outside the lookups' flow, which fetches every row
    // it admits): onto the tier now, one by one.
    const std::vector<float> rest = std::move(fresh_);
    fresh_.clear();
    for (int64_t k = 0; k < n && left > 0; ++k) {
        if (done[static_cast<size_t>(k)]) continue;
        const float* r = rest.data() + k * rec;
        tier_->write_range(fresh_first_ + k, 1, r, sc_ > 0 ? r + dim_ : nullptr);
        --left;
    }
}

void TieredRows::read(std::span<const int64_t> slots, float* w, float* state) {
    flush_fresh();
    tier_->read_rows(slots, w, state);
}

void TieredRows::read_range(int64_t s0, int64_t n, float* w, float* state) {
    flush_fresh();
    tier_->read_range(s0, n, w, state);
}

void TieredRows::write_range(int64_t s0, int64_t n, const float* w, const float* state) {
    flush_fresh();
    tier_->write_range(s0, n, w, state);
}

void TieredRows::update(const SparseRowOptimizer& opt, std::span<const int64_t> slots,
                        const float* grads, float lr, int64_t update) {
    handles_.resize(slots.size());
    tier_->resident_slots(slots, handles_.data());  // fetched by this step's lookups: pinned
    step_handles(opt, grads, lr, update);
}

void TieredRows::step_handles(const SparseRowOptimizer& opt, const float* grads, float lr,
                              int64_t update) {
    SparseRowStorage cache = tier_->cache_storage();
    opt.step(cache, tier_->cache_state(), handles_, grads, lr, update);
    tier_->mark_dirty(handles_);
}

// Note [Stale dynamic updates] (dynamic_stale.cpp): the rows were fetched s steps ago and may have
// left the cache since (RowTier::fetch_for_update, as Note [Stale updates on a tier]); the cache
// grows on demand to hold them with this step's rows.
void TieredRows::update_late(const SparseRowOptimizer& opt, std::span<const int64_t> slots,
                             const float* grads, float lr, int64_t update) {
    flush_fresh();
    handles_.resize(slots.size());
    tier_->fetch_for_update(slots, handles_.data());
    step_handles(opt, grads, lr, update);
}

void TieredRows::end_step() {
    flush_fresh();
    tier_->end_step();
}

void TieredRows::compact(std::span<const int64_t> dropped,
                         std::span<const std::pair<int64_t, int64_t>> moves) {
    flush_fresh();
    tier_->drop(dropped);
    tier_->relocate(moves);
}

void TieredRows::clear() {
    fresh_.clear();
    tier_->clear();
}

void TieredRows::prefetch(std::span<const int64_t> slots) {
    flush_fresh();
    tier_->prefetch(slots);
}

std::unique_ptr<DynamicRows> make_dynamic_rows(MemoryPool& pool, const std::string& name,
                                               int64_t dim, int64_t state_cols, int64_t slots,
                                               const DynamicTierOptions& tier) {
    if (tier.on()) return std::make_unique<TieredRows>(pool, name, dim, state_cols, slots, tier);
    auto rows = std::make_unique<MemoryRows>(pool, name, dim, state_cols);
    rows->grow(slots, 0);
    return rows;
}

}  // namespace zt
