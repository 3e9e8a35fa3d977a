// RowTier: see row_tier.h.
#include "embedding/row_tier.h"

#include <algorithm>
#include <cstring>

#include "offload/host_store.h"
#include "offload/nvme_store.h"
#include "util/error.h"
#include "util/timer.h"

// Note [Row pages]
// A row's record is its weights then its optimizer state, f32, record_floats floats. Records are
// packed whole into 4 KiB pages (the store's unit: O_DIRECT's alignment, and the NVMe's sector
// multiple): floor(4096 / record bytes) per page, the rest of the page unused; a record larger
// than a page takes its own run of pages, rounded up to 4 KiB. Row r lives in page r / per_page
// at (r % per_page) x record bytes. A dim-16 row with row-wise Adagrad (68 bytes) packs 60 per
// page (0.4% unused); with Adam (196 bytes) 20 (4.3%).
//
// Note [Row fetch]
// fetch() serves one lookup's rows. Resident rows are hits: pinned and touched. The misses need
// slots: free ones first, then victims in replacement order (never a row pinned in this step;
// when every slot is pinned the cache cannot hold one step's rows and the run stops with how many
// it needed). A dirty victim's record is copied out before its slot is reused. Then, in one batch
// at the store's queue depth: every page holding a miss or a dirty victim is read, the victims'
// records are patched into their page images and those pages written back (read-modify-write:
// the other rows of a page keep their bytes, which are current on the store since every row not
// resident or not dirty is), and the misses' records are copied from the page images into their
// slots. Each page is read once per fetch however many of its rows it serves (none that a
// prefetch read: Note [Row prefetch]). The writes go out from copies of their pages (one buffer,
// reused) and are left in flight while the step computes: the next fetch that reads or writes
// drains them before it reads a page or reuses the buffer, a prefetch that reads one of their
// pages drains them first (the Store's rule: no read overtakes a write), and range reads and
// writes wait for all of them.
// A killed process loses nothing by this: the store is scratch, remade from the checkpoint on
// resume (tests/cli/embedding_tier_cli_test.cpp kills one in the middle of a write-back).
//
// Note [Replacement order]
// LRU keeps slots in an intrusive doubly linked list, most recently touched first, so a touch and
// a victim are O(1); the victim is the tail, and since every row of the step was touched after
// the older ones, the pinned rows sit at the head and the walk past pinned rows is short. LFU
// orders (uses, last touch, slot) in a balanced tree (O(log capacity) a touch); uses count since
// the row entered the cache (a row that leaves starts again at 1, as most LFU caches do); ties go
// to the least recently touched.

namespace zt {

const char* row_cache_policy_name(RowCachePolicy p) {
    return p == RowCachePolicy::kLru ? "lru" : "lfu";
}

std::unique_ptr<Store> make_row_store(const std::string& device, const std::string& nvme_path,
                                      int queue_depth, const std::string& name, uint64_t bytes) {
    if (device == "cpu") return std::make_unique<HostStore>(bytes);
    ZT_CHECK(device == "nvme",
             "embedding.tier.device: expected \"none\", \"cpu\" or \"nvme\", got \"", device, "\"");
    NvmeStoreOptions n;
    n.dir = nvme_path;
    n.name = name;
    n.bytes = bytes;
    n.queue_depth = queue_depth;
    n.chunk_bytes = kStoreAlign * 256;  // pages go out one request each; ranges in 1 MiB pieces
    return std::make_unique<NvmeStore>(n);
}

nlohmann::json RowTierStats::metrics() const {
    return {{"lookups", lookups()},
            {"hits", hits},
            {"misses", misses},
            {"hit_rate",
             lookups() > 0 ? static_cast<double>(hits) / static_cast<double>(lookups()) : 1.0},
            {"evictions", evictions},
            {"writebacks", writebacks},
            {"bytes_read", bytes_read},
            {"bytes_written", bytes_written},
            {"stall_s", stall_s},
            {"prefetched_pages", prefetched},
            {"prefetch_hits", prefetch_hits},
            {"new_rows", fresh},
            {"moved_rows", moved},
            {"moved_reads", moved_reads}};
}

std::array<double, RowTierStats::kFields> RowTierStats::to_array() const {
    return {static_cast<double>(hits),
            static_cast<double>(misses),
            static_cast<double>(evictions),
            static_cast<double>(writebacks),
            static_cast<double>(pages_read),
            static_cast<double>(pages_written),
            static_cast<double>(prefetched),
            static_cast<double>(prefetch_hits),
            static_cast<double>(bytes_read),
            static_cast<double>(bytes_written),
            stall_s,
            static_cast<double>(fresh),
            static_cast<double>(moved),
            static_cast<double>(moved_reads)};
}

RowTierStats RowTierStats::from_array(const double* f) {
    RowTierStats s;
    s.hits = static_cast<int64_t>(f[0]);
    s.misses = static_cast<int64_t>(f[1]);
    s.evictions = static_cast<int64_t>(f[2]);
    s.writebacks = static_cast<int64_t>(f[3]);
    s.pages_read = static_cast<int64_t>(f[4]);
    s.pages_written = static_cast<int64_t>(f[5]);
    s.prefetched = static_cast<int64_t>(f[6]);
    s.prefetch_hits = static_cast<int64_t>(f[7]);
    s.bytes_read = static_cast<uint64_t>(f[8]);
    s.bytes_written = static_cast<uint64_t>(f[9]);
    s.stall_s = f[10];
    s.fresh = static_cast<int64_t>(f[11]);
    s.moved = static_cast<int64_t>(f[12]);
    s.moved_reads = static_cast<int64_t>(f[13]);
    return s;
}

RowTierStats& RowTierStats::operator+=(const RowTierStats& o) {
    const std::array<double, kFields> a = to_array(), b = o.to_array();
    std::array<double, kFields> sum{};
    for (size_t i = 0; i < kFields; ++i) sum[i] = a[i] + b[i];
    return *this = from_array(sum.data());
}

RowTierStats RowTierStats::operator-(const RowTierStats& o) const {
    const std::array<double, kFields> a = to_array(), b = o.to_array();
    std::array<double, kFields> diff{};
    for (size_t i = 0; i < kFields; ++i) diff[i] = a[i] - b[i];
    return from_array(diff.data());
}

RowTierStats RowTier::stats() const {
    RowTierStats s = stats_;
    const StoreStats st = store_->stats();
    s.bytes_read = st.bytes_read;
    s.bytes_written = st.bytes_written;
    return s;
}

int64_t RowTier::rows_per_page(int64_t cols, int64_t state_cols) {
    const auto rec = static_cast<size_t>(record_floats(cols, state_cols)) * sizeof(float);
    return rec <= kStoreAlign ? static_cast<int64_t>(kStoreAlign / rec) : 1;
}

int64_t RowTier::page_bytes(int64_t cols, int64_t state_cols) {
    const auto rec = static_cast<size_t>(record_floats(cols, state_cols)) * sizeof(float);
    return static_cast<int64_t>(
        rec <= kStoreAlign ? kStoreAlign : (rec + kStoreAlign - 1) / kStoreAlign * kStoreAlign);
}

uint64_t RowTier::store_bytes(int64_t rows, int64_t cols, int64_t state_cols) {
    const int64_t per = rows_per_page(cols, state_cols);
    return static_cast<uint64_t>((rows + per - 1) / per) *
           static_cast<uint64_t>(page_bytes(cols, state_cols));
}

RowTier::RowTier(MemoryPool& pool, const std::string& name, int64_t rows, int64_t cols,
                 int64_t state_cols, int64_t capacity, RowCachePolicy policy,
                 std::unique_ptr<Store> store)
    : pool_(pool),
      name_(name),
      rows_(rows),
      cols_(cols),
      sc_(state_cols),
      capacity_(capacity),
      rec_floats_(record_floats(cols, state_cols)),
      rpp_(rows_per_page(cols, state_cols)),
      page_bytes_(static_cast<size_t>(page_bytes(cols, state_cols))),
      policy_(policy),
      store_(std::move(store)),
      slot_of_(capacity) {
    ZT_ASSERT(rows > 0 && cols > 0 && state_cols >= 0, "RowTier: bad shape");
    ZT_ASSERT(capacity >= 1 && capacity <= rows, "RowTier: capacity ", capacity, " for ", rows,
              " rows");
    ZT_ASSERT(store_ && store_->capacity() >= store_bytes(rows, cols, state_cols),
              "RowTier: the store is smaller than the rows' pages");
    MemScope scope(pool, name, MemPhase::kOther);
    w_ = Tensor::empty(pool, {capacity, cols}, DType::kF32, MemCategory::kEmbedding);
    if (sc_ > 0)
        state_ = Tensor::empty(pool, {capacity, sc_}, DType::kF32, MemCategory::kEmbedding);
    const auto cap = static_cast<size_t>(capacity);
    row_of_.assign(cap, -1);
    dirty_.assign(cap, 0);
    pin_epoch_.assign(cap, 0);
    prev_.assign(cap, -1);
    next_.assign(cap, -1);
    uses_.assign(cap, 0);
    touched_.assign(cap, 0);
    free_.reserve(cap);
    for (int64_t s = capacity - 1; s >= 0; --s) free_.push_back(s);  // slot 0 first
}

RowTier::~RowTier() {
    try {
        settle();    // nothing may still move into or out of buffers about to go
    } catch (...) {  // a failed transfer was reported where it was waited for, or is moot now
    }
}

int64_t RowTier::cache_bytes() const {
    return capacity_ * (cols_ + sc_) * static_cast<int64_t>(sizeof(float));
}

SparseRowStorage RowTier::cache_storage() {
    SparseRowStorage s;
    s.rows = capacity_;
    s.cols = cols_;
    s.f32 = w_.data<float>();
    return s;
}

void RowTier::touch(int64_t slot) {
    const auto u = static_cast<size_t>(slot);
    ++clock_;
    if (policy_ == RowCachePolicy::kLfu) {
        if (uses_[u] > 0) lfu_.erase({uses_[u], touched_[u], slot});
        ++uses_[u];
        touched_[u] = clock_;
        lfu_.insert({uses_[u], touched_[u], slot});
        return;
    }
    if (head_ == slot) return;
    if (prev_[u] >= 0 || tail_ == slot) forget(slot);  // in the list: unlink first
    prev_[u] = -1;
    next_[u] = head_;
    if (head_ >= 0) prev_[static_cast<size_t>(head_)] = slot;
    head_ = slot;
    if (tail_ < 0) tail_ = slot;
}

void RowTier::forget(int64_t slot) {
    const auto u = static_cast<size_t>(slot);
    if (policy_ == RowCachePolicy::kLfu) {
        if (uses_[u] > 0) lfu_.erase({uses_[u], touched_[u], slot});
        uses_[u] = 0;
        return;
    }
    const int64_t p = prev_[u], n = next_[u];
    if (p >= 0)
        next_[static_cast<size_t>(p)] = n;
    else if (head_ == slot)
        head_ = n;
    if (n >= 0)
        prev_[static_cast<size_t>(n)] = p;
    else if (tail_ == slot)
        tail_ = p;
    prev_[u] = next_[u] = -1;
}

int64_t RowTier::victim() {
    if (policy_ == RowCachePolicy::kLfu) {
        for (const auto& [uses, when, slot] : lfu_)
            if (pin_epoch_[static_cast<size_t>(slot)] != epoch_) return slot;
        return -1;
    }
    for (int64_t s = tail_; s >= 0; s = prev_[static_cast<size_t>(s)])
        if (pin_epoch_[static_cast<size_t>(s)] != epoch_) return s;
    return -1;
}

void RowTier::reserve_pages(size_t n) {
    if (n <= page_buf_pages_) return;
    const size_t want = std::max(n, page_buf_pages_ * 2);
    page_buf_ = alloc_aligned_buffer(want * page_bytes_, "embedding tier page buffer");
    page_buf_pages_ = want;
}

void RowTier::read_pages(std::span<const Page> pages) {
    std::vector<Store::Ticket> tickets;
    tickets.reserve(pages.size());
    for (const Page& p : pages)
        tickets.push_back(store_->read(page_offset(p.page), page_image(p.buf), page_bytes_));
    for (Store::Ticket t : tickets) store_->wait(t);
    stats_.pages_read += static_cast<int64_t>(pages.size());
}

void RowTier::write_pages(std::span<const Page> pages) {
    std::vector<Store::Ticket> tickets;
    tickets.reserve(pages.size());
    for (const Page& p : pages)
        tickets.push_back(store_->write(page_offset(p.page), page_image(p.buf), page_bytes_));
    for (Store::Ticket t : tickets) store_->wait(t);
    stats_.pages_written += static_cast<int64_t>(pages.size());
}

void RowTier::copy_to_record(int64_t slot, std::byte* record) const {
    std::memcpy(record, w_.data<float>() + slot * cols_,
                static_cast<size_t>(cols_) * sizeof(float));
    if (sc_ > 0)
        std::memcpy(record + static_cast<size_t>(cols_) * sizeof(float),
                    state_.data<float>() + slot * sc_, static_cast<size_t>(sc_) * sizeof(float));
}

void RowTier::copy_from_record(const std::byte* record, int64_t slot) {
    std::memcpy(w_.data<float>() + slot * cols_, record,
                static_cast<size_t>(cols_) * sizeof(float));
    if (sc_ > 0)
        std::memcpy(state_.data<float>() + slot * sc_,
                    record + static_cast<size_t>(cols_) * sizeof(float),
                    static_cast<size_t>(sc_) * sizeof(float));
}

void RowTier::fetch(std::span<const int64_t> rows, int64_t* slots) { fetch(rows, slots, {}); }

void RowTier::fetch(std::span<const int64_t> rows, int64_t* slots, std::span<const uint8_t> fresh) {
    ZT_ASSERT(fresh.empty() || fresh.size() == rows.size(), "RowTier::fetch: one flag per row");
    // Phase 1 (Note [Row fetch]): hits pinned; misses claim slots, victims' dirty records saved.
    misses_.clear();
    evicted_rows_.clear();
    evicted_records_.clear();
    for (size_t i = 0; i < rows.size(); ++i) {
        const int64_t r = rows[i];
        ZT_ASSERT(r >= 0 && r < rows_, "RowTier::fetch: row ", r, " outside [0, ", rows_, ")");
        int64_t s = slot_of_.find(static_cast<uint64_t>(r));
        if (s >= 0) {
            if (counting_) ++stats_.hits;
            if (!fresh.empty() && fresh[i]) dirty_[static_cast<size_t>(s)] = 1;
        } else {
            if (!free_.empty()) {
                s = free_.back();
                free_.pop_back();
            } else {
                s = victim();
                if (s < 0 && grow_when_full_ && capacity_ < rows_) {
                    grow_cache(std::min(rows_, capacity_ + std::max<int64_t>(capacity_ / 2, 1)));
                    s = free_.back();
                    free_.pop_back();
                }
            }
            if (s < 0 || row_of_[static_cast<size_t>(s)] >= 0) {  // a victim leaves
                ZT_CHECK(s >= 0, "embedding.tier: the cache holds ", capacity_,
                         " rows of a shard of ", rows_,
                         ", and one step touches more of them; raise embedding.tier.cache_ratio "
                         "or cache_bytes");
                const auto su = static_cast<size_t>(s);
                forget(s);
                slot_of_.erase(static_cast<uint64_t>(row_of_[su]));
                ++stats_.evictions;
                --resident_;
                if (dirty_[su]) {
                    evicted_rows_.push_back(row_of_[su]);
                    const size_t at = evicted_records_.size();
                    evicted_records_.resize(at + static_cast<size_t>(rec_floats_));
                    copy_to_record(s, reinterpret_cast<std::byte*>(evicted_records_.data() + at));
                }
            }
            const auto su = static_cast<size_t>(s);
            row_of_[su] = r;
            slot_of_.insert(static_cast<uint64_t>(r), s);
            dirty_[su] = 0;
            ++resident_;
            if (counting_) ++stats_.misses;
            if (!fresh.empty() && fresh[i]) {  // new: nothing to read, the caller writes it
                dirty_[su] = 1;
                ++stats_.fresh;
            } else {
                misses_.push_back(s);
            }
        }
        pin_epoch_[static_cast<size_t>(s)] = epoch_;
        touch(s);
        slots[i] = s;
    }
    if (misses_.empty() && evicted_rows_.empty()) return;
    Stopwatch timer;
    // A row evicted above and asked for again later in the same call: its record is the saved
    // one (the store's is stale until the write-back below); it stays dirty.
    std::vector<std::pair<int64_t, size_t>> saved;  // (row, index into evicted_rows_)
    for (size_t k = 0; k < evicted_rows_.size(); ++k) saved.emplace_back(evicted_rows_[k], k);
    std::sort(saved.begin(), saved.end());
    // Phase 2: every page to read (keys: page << 1 | has a write-back), in page order.
    std::vector<int64_t> from_store;  // missing slots filled from the store
    std::vector<uint64_t> keys;
    for (int64_t s : misses_) {
        const int64_t r = row_of_[static_cast<size_t>(s)];
        const auto it = std::lower_bound(saved.begin(), saved.end(), std::make_pair(r, size_t{0}));
        if (it != saved.end() && it->first == r) {
            copy_from_record(reinterpret_cast<const std::byte*>(evicted_records_.data() +
                                                                it->second * rec_floats_),
                             s);
            dirty_[static_cast<size_t>(s)] = 1;
            continue;
        }
        from_store.push_back(s);
        keys.push_back(static_cast<uint64_t>(page_of(r)) << 1);
    }
    for (int64_t r : evicted_rows_) keys.push_back(static_cast<uint64_t>(page_of(r)) << 1 | 1);
    std::sort(keys.begin(), keys.end());
    std::vector<int64_t> pages;  // distinct, ascending
    std::vector<uint8_t> written;
    for (uint64_t k : keys) {
        const auto p = static_cast<int64_t>(k >> 1);
        if (pages.empty() || pages.back() != p) {
            pages.push_back(p);
            written.push_back(0);
        }
        written.back() |= static_cast<uint8_t>(k & 1);
    }
    // The misses and write-backs grouped by page, in the same order.
    std::sort(from_store.begin(), from_store.end(), [&](int64_t a, int64_t b) {
        return row_of_[static_cast<size_t>(a)] < row_of_[static_cast<size_t>(b)];
    });
    std::vector<size_t> back(evicted_rows_.size());
    for (size_t k = 0; k < back.size(); ++k) back[k] = k;
    std::sort(back.begin(), back.end(),
              [&](size_t a, size_t b) { return evicted_rows_[a] < evicted_rows_[b]; });
    // The last fetch's write-backs have had a step's compute to finish; their buffer is reused,
    // and no page below is read before its write finished (the Store's rule).
    drain_writes();
    size_t to_write = 0;
    for (uint8_t w : written) to_write += w;
    if (to_write > write_buf_pages_) {
        write_buf_ = alloc_aligned_buffer(to_write * page_bytes_, "embedding tier write-back");
        write_buf_pages_ = to_write;
    }
    size_t mi = 0, bi = 0, wi = 0;
    std::vector<Page> batch;
    std::vector<int64_t> out_pages;
    std::vector<std::byte*> image(kBatchPages);
    for (size_t p0 = 0; p0 < pages.size(); p0 += kBatchPages) {
        const size_t p1 = std::min(pages.size(), p0 + kBatchPages);
        reserve_pages(p1 - p0);
        batch.clear();
        for (size_t p = p0; p < p1; ++p) {
            // A prefetched page (Note [Row prefetch]) is current: no read.
            std::byte* ahead = prefetched_image(pages[p]);
            image[p - p0] = ahead ? ahead : page_image(p - p0);
            if (!ahead) batch.push_back({pages[p], p - p0});
        }
        read_pages(batch);
        const size_t w0 = wi;
        out_pages.clear();
        for (size_t p = p0; p < p1; ++p) {
            std::byte* img = image[p - p0];
            const bool ahead = img != page_image(p - p0);
            for (; mi < from_store.size() &&
                   page_of(row_of_[static_cast<size_t>(from_store[mi])]) == pages[p];
                 ++mi) {
                const int64_t s = from_store[mi];
                stats_.prefetch_hits += ahead;
                copy_from_record(img + record_at(row_of_[static_cast<size_t>(s)]), s);
            }
            for (; bi < back.size() && page_of(evicted_rows_[back[bi]]) == pages[p]; ++bi) {
                const int64_t r = evicted_rows_[back[bi]];
                std::memcpy(img + record_at(r), evicted_records_.data() + back[bi] * rec_floats_,
                            static_cast<size_t>(rec_floats_) * sizeof(float));
            }
            if (!written[p]) continue;
            std::memcpy(write_buf_.get() + wi++ * page_bytes_, img, page_bytes_);
            out_pages.push_back(pages[p]);
        }
        issue_writes(out_pages, write_buf_.get() + w0 * page_bytes_);
    }
    stats_.writebacks += static_cast<int64_t>(evicted_rows_.size());
    stats_.stall_s += timer.elapsed_s();
}

void RowTier::issue_writes(std::span<const int64_t> pages, const std::byte* images) {
    if (pages.empty()) return;
    for (size_t k = 0; k < pages.size(); ++k) {
        write_tickets_.push_back(
            store_->write(page_offset(pages[k]), images + k * page_bytes_, page_bytes_));
        pending_pages_.insert(pages[k]);
    }
    stats_.pages_written += static_cast<int64_t>(pages.size());
    if (on_writeback_) on_writeback_();
}

void RowTier::drain_writes() {
    if (write_tickets_.empty()) return;
    Stopwatch timer;
    for (Store::Ticket t : write_tickets_) store_->wait(t);
    write_tickets_.clear();
    pending_pages_.clear();
    stats_.stall_s += timer.elapsed_s();
}

bool RowTier::write_pending(int64_t page) const { return pending_pages_.count(page) > 0; }

std::byte* RowTier::prefetched_image(int64_t page) {
    const auto it = prefetched_.find(page);
    if (it == prefetched_.end()) return nullptr;
    if (it->second.ticket != 0) {
        store_->wait(it->second.ticket);
        it->second.ticket = 0;
    }
    return it->second.image;
}

void RowTier::drop_prefetched() {
    for (auto& [page, e] : prefetched_)
        if (e.ticket != 0) store_->wait(e.ticket);
    prefetched_.clear();
}

void RowTier::settle() {
    drain_writes();
    drop_prefetched();
}

// Note [Row prefetch]
// prefetch(rows) reads, without waiting, the pages of the rows that are not resident now into
// images of their own (outside the cache; up to kPrefetchPages). A later fetch() takes a missing
// row's record from its page's image instead of reading the page, and uses the image as the base
// of that page's write-back. The images stay current because every write-back of a page patches
// its image first (the write goes out from a copy of it), and range writes drop them all. A row
// resident at prefetch and evicted before its fetch is read then. A new prefetch drops the previous
// one's images: the model issues it right after the current lookup has fetched (models/dlrm:
// Dlrm::logits), so the disk reads the next micro-batch's rows while this one computes. Rows, slots
// and bits are those of fetch() without a prefetch.
void RowTier::prefetch(std::span<const int64_t> rows) {
    drop_prefetched();
    std::vector<int64_t> pages;
    for (int64_t r : rows) {
        ZT_ASSERT(r >= 0 && r < rows_, "RowTier::prefetch: row ", r, " outside [0, ", rows_, ")");
        if (slot_of_.find(static_cast<uint64_t>(r)) < 0) pages.push_back(page_of(r));
    }
    std::sort(pages.begin(), pages.end());
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    if (pages.size() > kPrefetchPages) pages.resize(kPrefetchPages);
    if (pages.empty()) return;
    for (int64_t p : pages)
        if (write_pending(p)) {
            drain_writes();
            break;
        }
    if (pages.size() > prefetch_pages_) {
        prefetch_buf_ = alloc_aligned_buffer(pages.size() * page_bytes_, "embedding tier prefetch");
        prefetch_pages_ = pages.size();
    }
    for (size_t k = 0; k < pages.size(); ++k) {
        std::byte* img = prefetch_buf_.get() + k * page_bytes_;
        prefetched_[pages[k]] = {img, store_->read(page_offset(pages[k]), img, page_bytes_)};
    }
    stats_.pages_read += static_cast<int64_t>(pages.size());
    stats_.prefetched += static_cast<int64_t>(pages.size());
}

void RowTier::fetch_for_update(std::span<const int64_t> rows, int64_t* slots) {
    counting_ = false;
    try {
        fetch(rows, slots);
    } catch (...) {
        counting_ = true;
        throw;
    }
    counting_ = true;
}

void RowTier::resident_slots(std::span<const int64_t> rows, int64_t* slots) const {
    for (size_t i = 0; i < rows.size(); ++i) {
        slots[i] = slot_of_.find(static_cast<uint64_t>(rows[i]));
        ZT_ASSERT(slots[i] >= 0 && pin_epoch_[static_cast<size_t>(slots[i])] == epoch_,
                  "RowTier: row ", rows[i], " is not pinned in this step");
    }
}

void RowTier::mark_dirty(std::span<const int64_t> slots) {
    for (int64_t s : slots) dirty_[static_cast<size_t>(s)] = 1;
}

void RowTier::end_step() { ++epoch_; }

int64_t RowTier::page_batch(int64_t r, int64_t end, std::vector<Page>& batch) {
    const int64_t p0 = page_of(r);
    const int64_t p1 = std::min(page_of(end - 1) + 1, p0 + static_cast<int64_t>(kBatchPages));
    reserve_pages(static_cast<size_t>(p1 - p0));
    batch.clear();
    for (int64_t p = p0; p < p1; ++p) batch.push_back({p, static_cast<size_t>(p - p0)});
    return p0;
}

void RowTier::read_range(int64_t r0, int64_t n, float* w, float* state) {
    ZT_ASSERT(r0 >= 0 && n >= 0 && r0 + n <= rows_, "RowTier::read_range: outside the rows");
    drain_writes();
    std::vector<float> tmp(static_cast<size_t>(rec_floats_));
    std::vector<Page> batch;
    for (int64_t r = r0; r < r0 + n;) {
        const int64_t p0 = page_batch(r, r0 + n, batch);
        const int64_t p1 = p0 + static_cast<int64_t>(batch.size());
        read_pages(batch);
        const int64_t end = std::min(r0 + n, p1 * rpp_);
        for (; r < end; ++r) {
            const int64_t s = slot_of_.find(static_cast<uint64_t>(r));
            const std::byte* rec = page_image(static_cast<size_t>(page_of(r) - p0)) + record_at(r);
            if (s >= 0) {  // the cache's copy is the current one
                copy_to_record(s, reinterpret_cast<std::byte*>(tmp.data()));
                rec = reinterpret_cast<const std::byte*>(tmp.data());
            }
            std::memcpy(w + (r - r0) * cols_, rec, static_cast<size_t>(cols_) * sizeof(float));
            if (state && sc_ > 0)
                std::memcpy(state + (r - r0) * sc_,
                            rec + static_cast<size_t>(cols_) * sizeof(float),
                            static_cast<size_t>(sc_) * sizeof(float));
        }
    }
}

void RowTier::write_range(int64_t r0, int64_t n, const float* w, const float* state) {
    ZT_ASSERT(r0 >= 0 && n >= 0 && r0 + n <= rows_, "RowTier::write_range: outside the rows");
    settle();
    std::vector<Page> batch;
    for (int64_t r = r0; r < r0 + n;) {
        const int64_t p0 = page_batch(r, r0 + n, batch);
        const int64_t p1 = p0 + static_cast<int64_t>(batch.size());
        // Pages the range covers whole, with state given, need no read.
        const bool whole = state != nullptr || sc_ == 0;
        std::vector<Page> partial;
        for (const Page& pg : batch) {
            const int64_t first = pg.page * rpp_, last = std::min(rows_, first + rpp_);
            if (!whole || first < r0 || last > r0 + n) partial.push_back(pg);
        }
        if (!partial.empty()) read_pages(partial);
        const int64_t end = std::min(r0 + n, p1 * rpp_);
        for (; r < end; ++r) {
            std::byte* rec = page_image(static_cast<size_t>(page_of(r) - p0)) + record_at(r);
            const int64_t s = slot_of_.find(static_cast<uint64_t>(r));
            if (s >= 0) {  // the cache's copy becomes the given one, and the record the cache's
                std::memcpy(w_.data<float>() + s * cols_, w + (r - r0) * cols_,
                            static_cast<size_t>(cols_) * sizeof(float));
                if (state && sc_ > 0)
                    std::memcpy(state_.data<float>() + s * sc_, state + (r - r0) * sc_,
                                static_cast<size_t>(sc_) * sizeof(float));
                copy_to_record(s, rec);
                dirty_[static_cast<size_t>(s)] = 0;
                continue;
            }
            std::memcpy(rec, w + (r - r0) * cols_, static_cast<size_t>(cols_) * sizeof(float));
            if (state && sc_ > 0)
                std::memcpy(rec + static_cast<size_t>(cols_) * sizeof(float),
                            state + (r - r0) * sc_, static_cast<size_t>(sc_) * sizeof(float));
        }
        write_pages(batch);
    }
}

}  // namespace zt
