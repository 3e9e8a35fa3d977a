// RowTier: the rows of one embedding shard, with their sparse optimizer state beside each row, kept
// in a Store (offload/store.h: host memory outside the budget, or a swap file on NVMe) behind a
// cache of hot rows in the budget (embedding.tier, docs/embedding-tier.md). Records of (weights,
// state) are packed into 4 KiB pages; a lookup makes its rows resident (Note [Row fetch]), reading
// every missing page of a batch at the store's queue depth and writing evicted dirty rows back,
// and pins them until the step's update has run (end_step). The cache holds exact f32 copies, so a
// tiered table trains bit for bit like one in memory; only where the bytes live changes. A
// dynamic table's tier also grows, admits new rows without a read, and drops and renames rows
// (row_tier_grow.cpp, Note [Growing tier]). Not thread-safe: one caller thread (the rank's).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "embedding/u64_map.h"
#include "offload/aio.h"
#include "offload/store.h"
#include "optim/sparse_rows.h"
#include "tensor/tensor.h"

namespace zt {

enum class RowCachePolicy : uint8_t { kLru, kLfu };
const char* row_cache_policy_name(RowCachePolicy p);  // "lru", "lfu"

// Counters since the tier was made; the trainer reports differences per step.
struct RowTierStats {
    int64_t hits = 0;        // rows asked for by fetch() that were resident
    int64_t misses = 0;      // and that were not
    int64_t evictions = 0;   // rows that left the cache
    int64_t writebacks = 0;  // of those, dirty ones written to the store
    int64_t pages_read = 0, pages_written = 0;
    int64_t prefetched = 0;                      // pages read ahead by prefetch()
    int64_t prefetch_hits = 0;                   // misses served from a prefetched page
    uint64_t bytes_read = 0, bytes_written = 0;  // the store's
    double stall_s = 0;                          // seconds fetch() waited for the store
    // Dynamic tables (embedding/dynamic_rows.h): misses of new rows, made in the cache without a
    // read, and rows moved to another row number by relocate() (and of those, read to move).
    int64_t fresh = 0, moved = 0, moved_reads = 0;
    int64_t lookups() const { return hits + misses; }

    // As doubles, in declaration order (an all-gather's payload), and back.
    static constexpr size_t kFields = 14;
    std::array<double, kFields> to_array() const;
    // The counters as the metrics' embedding.tier object (docs/embedding-tier.md, "Metrics").
    nlohmann::json metrics() const;
    static RowTierStats from_array(const double* f);
    RowTierStats& operator+=(const RowTierStats& o);  // every field summed, stall_s too
    RowTierStats operator-(const RowTierStats& o) const;
};

// The store behind a tier (embedding.tier.device): host memory ("cpu"), or a swap file `name`
// under nvme_path ("nvme") at queue_depth transfers in flight.
std::unique_ptr<Store> make_row_store(const std::string& device, const std::string& nvme_path,
                                      int queue_depth, const std::string& name, uint64_t bytes);

class RowTier {
  public:
    // A shard of `rows` rows, `cols` weights and `state_cols` state floats each, with `capacity`
    // rows cached (>= 1, at most rows) in tensors from `pool` (MemCategory::kEmbedding, named
    // `name`). The store must hold store_bytes(rows, cols, state_cols) bytes; its contents are
    // undefined until written (fill them with write_range before the first fetch).
    RowTier(MemoryPool& pool, const std::string& name, int64_t rows, int64_t cols,
            int64_t state_cols, int64_t capacity, RowCachePolicy policy,
            std::unique_ptr<Store> store);
    ~RowTier();
    RowTier(const RowTier&) = delete;
    RowTier& operator=(const RowTier&) = delete;

    // Record layout (Note [Row pages]).
    static int64_t record_floats(int64_t cols, int64_t state_cols) { return cols + state_cols; }
    static int64_t rows_per_page(int64_t cols, int64_t state_cols);
    static int64_t page_bytes(int64_t cols, int64_t state_cols);
    static uint64_t store_bytes(int64_t rows, int64_t cols, int64_t state_cols);

    int64_t rows() const { return rows_; }
    int64_t cols() const { return cols_; }
    int64_t state_cols() const { return sc_; }
    int64_t capacity() const { return capacity_; }
    int64_t resident() const { return resident_; }
    RowCachePolicy policy() const { return policy_; }
    const char* device() const { return store_->tier(); }
    // Bytes of the cache (weights and state) in the budget, and of the map from rows to slots.
    int64_t cache_bytes() const;

    // Makes rows[i] resident (each in [0, rows), any order, repeats allowed) and writes its cache
    // slot to slots[i]. The rows stay pinned until end_step(). Throws zt::Error when the rows
    // pinned in this step do not fit the cache.
    void fetch(std::span<const int64_t> rows, int64_t* slots);
    // Starts reading the pages of the rows not resident now, without waiting, for a later fetch
    // (Note [Row prefetch]); drops what an earlier prefetch read.
    void prefetch(std::span<const int64_t> rows);
    // Waits for write-backs in flight and drops prefetched pages.
    void settle();
    // fetch() for an update of rows this step's lookups need not have fetched (a stale update,
    // Note [Stale updates on a tier] in embedding/sharded_tables.cpp): pinned until end_step(),
    // not counted as lookups (hits, misses).
    void fetch_for_update(std::span<const int64_t> rows, int64_t* slots);
    // The slots of rows that are resident (fetched in this step, so pinned); not counted as
    // lookups.
    void resident_slots(std::span<const int64_t> rows, int64_t* slots) const;
    // The cache as a SparseRowStorage of capacity() rows (slots), and its state (capacity() x
    // state_cols, null without state): the sparse optimizer updates slots in place.
    SparseRowStorage cache_storage();
    float* cache_state() { return state_cols() > 0 ? state_.data<float>() : nullptr; }
    const float* slot_weights(int64_t slot) const { return w_.data<float>() + slot * cols_; }
    // Slots whose weights or state changed: written back when they leave.
    void mark_dirty(std::span<const int64_t> slots);
    // Unpins every row (after the step's update).
    void end_step();

    // Rows [r0, r0 + n) as they are now (the cache's copy where a row is resident): weights into
    // w (n x cols), state into state (n x state_cols; may be null). Leaves the cache as it is.
    void read_range(int64_t r0, int64_t n, float* w, float* state);
    // Sets rows [r0, r0 + n) in the store and in the cache where resident; state null: the rows'
    // state stays as it is.
    void write_range(int64_t r0, int64_t n, const float* w, const float* state);

    // Growing (dynamic tables, embedding/dynamic_rows.h; Note [Growing tier]).
    // fetch() where rows flagged in `fresh` (one flag per row, or empty) are new: a missing one
    // is not read from the store; its slot's contents are the caller's to write, and it is dirty.
    void fetch(std::span<const int64_t> rows, int64_t* slots, std::span<const uint8_t> fresh);
    // The rows become [0, rows) (more than now); the store must already hold their pages.
    void grow_rows(int64_t rows);
    // The cache becomes `capacity` slots (more than now, at most rows()); slots keep their rows.
    void grow_cache(int64_t capacity);
    // When a fetch finds every slot pinned: grow the cache (by half, up to rows()) instead of
    // stopping the run.
    void grow_cache_when_full(bool on) { grow_when_full_ = on; }
    // Rows whose records no longer matter leave the cache, unwritten. Between steps.
    void drop(std::span<const int64_t> rows);
    // Each (from, to): row from's record becomes row to's (to was dropped, or never held); from's
    // record no longer matters. Rows not resident are fetched first (at the queue depth); the
    // moved rows stay resident and dirty. Between steps (it unpins every row).
    void relocate(std::span<const std::pair<int64_t, int64_t>> moves);
    // Rows (any, repeats allowed) as they are now, like read_range; the cache is left as it is.
    void read_rows(std::span<const int64_t> rows, float* w, float* state);
    // Forgets every row (the store's contents no longer matter): an empty cache.
    void clear();

    RowTierStats stats() const;
    // Runs between issuing a fetch's write-backs and waiting for them (fault injection's
    // "kill_in_writeback" point); null: nothing.
    void on_writeback(std::function<void()> hook) { on_writeback_ = std::move(hook); }

  private:
    struct Page {
        int64_t page;  // index in the store
        size_t buf;    // index of its image in page_buf_
    };
    int64_t page_of(int64_t row) const { return row / rpp_; }
    uint64_t page_offset(int64_t page) const { return static_cast<uint64_t>(page) * page_bytes_; }
    size_t record_at(int64_t row) const {  // byte offset of row's record in its page
        return static_cast<size_t>((row % rpp_) * rec_floats_) * sizeof(float);
    }
    void touch(int64_t slot);
    void forget(int64_t slot);  // leaves the replacement order
    int64_t victim();           // the unpinned slot to leave next, or -1
    std::byte* page_image(size_t i) { return page_buf_.get() + i * page_bytes_; }
    void reserve_pages(size_t n);
    // The next batch of pages holding rows [r, end) (at most kBatchPages, images 0..), with room
    // for their images; returns the first page.
    int64_t page_batch(int64_t r, int64_t end, std::vector<Page>& batch);
    // Reads (and waits for) the pages of `pages` into their images.
    void read_pages(std::span<const Page> pages);
    void write_pages(std::span<const Page> pages);
    void copy_to_record(int64_t slot, std::byte* record) const;
    void copy_from_record(const std::byte* record, int64_t slot);

    MemoryPool& pool_;
    std::string name_;
    bool grow_when_full_ = false;
    bool counting_ = true;  // fetch() counts hits and misses (not relocate()'s, fetch_for_update's)
    int64_t rows_, cols_, sc_, capacity_;
    int64_t rec_floats_, rpp_;
    size_t page_bytes_;
    RowCachePolicy policy_;
    std::unique_ptr<Store> store_;
    Tensor w_, state_;                 // (capacity, cols), (capacity, state_cols)
    U64Map slot_of_;                   // row -> slot
    std::vector<int64_t> row_of_;      // slot -> row, -1: free
    std::vector<uint8_t> dirty_;       // per slot
    std::vector<uint64_t> pin_epoch_;  // per slot: pinned while equal to epoch_
    uint64_t epoch_ = 1;
    std::vector<int64_t> free_;  // free slots
    int64_t resident_ = 0;
    // LRU: a doubly linked list of slots, most recent at head_ (Note [Replacement order]).
    std::vector<int64_t> prev_, next_;
    int64_t head_ = -1, tail_ = -1;
    // LFU: (uses, last touch, slot) ordered; uses_ and touched_ per slot.
    std::set<std::tuple<int64_t, uint64_t, int64_t>> lfu_;
    std::vector<int64_t> uses_;
    std::vector<uint64_t> touched_;
    uint64_t clock_ = 0;
    AlignedBuffer page_buf_;
    size_t page_buf_pages_ = 0;
    static constexpr size_t kBatchPages = 512;       // pages per I/O batch (2 MiB of 4 KiB pages)
    static constexpr size_t kPrefetchPages = 16384;  // 64 MiB of 4 KiB pages at most
    // The last fetch's write-backs, in flight: copies of their pages (write_buf_, reused by the
    // next fetch, which drains them first), tickets and pages.
    AlignedBuffer write_buf_;
    size_t write_buf_pages_ = 0;
    std::vector<Store::Ticket> write_tickets_;
    std::unordered_set<int64_t> pending_pages_;
    // Writes the n page images at `images` to `pages` without waiting.
    void issue_writes(std::span<const int64_t> pages, const std::byte* images);
    void drain_writes();
    bool write_pending(int64_t page) const;
    // Prefetched pages (Note [Row prefetch]): image, and the read's ticket until waited for (0).
    struct Prefetched {
        std::byte* image;
        Store::Ticket ticket;
    };
    std::unordered_map<int64_t, Prefetched> prefetched_;
    AlignedBuffer prefetch_buf_;
    size_t prefetch_pages_ = 0;
    // The current image of a prefetched page (waiting for its read), or null.
    std::byte* prefetched_image(int64_t page);
    void drop_prefetched();
    // fetch()'s scratch: missing slots, dirty victims' rows and records.
    std::vector<int64_t> misses_;
    std::vector<int64_t> evicted_rows_;
    std::vector<float> evicted_records_;
    RowTierStats stats_;
    std::function<void()> on_writeback_;
};

}  // namespace zt
