// DynamicTable: one embedding table keyed by the raw 64-bit id, collision-free (docs/
// embedding-dynamic.md). Rows exist only for admitted ids: an id becomes a row on its min_count-th
// sighting (Note [Admission]), and rows leave when unseen for `evict_unseen_steps` steps or, past
// `max_rows`, least recently or least frequently used first (Note [Eviction]). An id -> slot
// U64Map (u64_map.h) finds rows; the rows are dense in slots [0, rows) (an eviction moves the last
// row into the hole), their values with the sparse optimizer's state beside them in DynamicRows
// (dynamic_rows.h): two tensors from the pool (MemCategory::kEmbedding) grown by doubling, or a
// tier with a cache of hot rows (embedding.tier). A row's initial value depends only on
// (seed, table name, id), so every layout and every re-admission starts it identically. Evicted
// ids are logged until an export takes them, so a served model never keeps a row training
// dropped. For incremental checkpoints the table knows which slots changed since the last
// mark_saved() and, with track_changes(), which ids left (Note [Incremental table state]).
// Leaves out: bf16 rows, threads (callers deduplicate ids and call from one thread).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "autograd/module.h"
#include "embedding/dynamic_rows.h"
#include "embedding/u64_map.h"
#include "optim/sparse_rows.h"
#include "tensor/tensor.h"

namespace zt {

enum class EvictPolicy : uint8_t { kLru, kLfu };
enum class UnadmittedRow : uint8_t { kZeros, kDefaultRow };

struct DynamicTableOptions {
    std::string name;  // "emb_l.3.weight": the initialization stream
    int64_t dim = 0;
    int64_t min_count = 1;           // sightings before an id gets a row (1: at first sight)
    int64_t evict_unseen_steps = 0;  // S: rows unseen for S steps leave; 0: never
    int64_t max_rows = 0;            // R: at most R rows after each step; 0: no cap
    EvictPolicy policy = EvictPolicy::kLru;
    UnadmittedRow unadmitted = UnadmittedRow::kZeros;
    ParamInit init = ParamInit::zeros();  // of element (id * dim + c) in stream hash(name)
    uint64_t seed = 42;
    SparseOptimOptions optimizer;  // for the state per row and its initial value
    DynamicTierOptions tier;       // where the rows live (device "none": in memory)
};

// The table's figures for metrics.
struct DynamicTableStats {
    int64_t rows = 0, pending = 0;          // live rows; ids counted but not yet admitted
    int64_t admissions = 0, evictions = 0;  // since the run started (checkpoints keep them)
    double load_factor = 0;                 // of the id -> row map
    int64_t map_slots = 0;                  // its capacity
    int64_t bytes = 0;                      // rows, state, maps and counters held
};

class DynamicTable {
  public:
    DynamicTable(MemoryPool& pool, DynamicTableOptions options);
    DynamicTable(const DynamicTable&) = delete;
    DynamicTable& operator=(const DynamicTable&) = delete;

    const DynamicTableOptions& options() const { return options_; }
    int64_t dim() const { return options_.dim; }
    int64_t state_per_row() const { return state_cols_; }
    int64_t rows() const { return static_cast<int64_t>(ids_.size()); }
    int64_t step() const { return step_; }  // completed steps

    // A training sighting of id in the current step (call once per micro-batch that holds it):
    // counts it, admits it at min_count, and marks the row used. The row's slot, or -1 while the
    // id is not admitted.
    int64_t see(uint64_t id);
    // The row's slot, or -1; changes nothing (evaluation).
    int64_t find(uint64_t id) const { return index_.find(id); }
    uint64_t id_of(int64_t slot) const { return ids_[static_cast<size_t>(slot)]; }
    // Rows in memory only (no tier): the row of a slot, the rows as the sparse optimizer sees
    // them, and their state (rows x state_per_row()).
    const float* row(int64_t slot) const;
    SparseRowStorage storage();
    float* state();
    // Any storage (DynamicRows): a training lookup's rows, readable through fetched_row(handle)
    // until the step ends; copies of rows (evaluation, exports); the step's sparse update of the
    // rows used (distinct slots, fetched in this step); read-ahead of rows for a later fetch.
    void fetch(std::span<const int64_t> slots, int64_t* handles) { rows_->fetch(slots, handles); }
    const float* fetched_row(int64_t handle) const { return rows_->row(handle); }
    void read_rows(std::span<const int64_t> slots, float* w) const {
        rows_->read(slots, w, nullptr);
    }
    void read_range(int64_t s0, int64_t n, float* w) const { rows_->read_range(s0, n, w, nullptr); }
    void update(const SparseRowOptimizer& opt, std::span<const int64_t> slots, const float* grads,
                float lr, int64_t update) {
        rows_->update(opt, slots, grads, lr, update);
    }
    // The same for rows fetched in an earlier step (a stale update, Note [Stale dynamic
    // updates] in dynamic_stale.cpp): a tier fetches them again. unpin(): the rows fetched so
    // far may leave a tier's cache (between two held updates; the table's step goes on).
    void update_late(const SparseRowOptimizer& opt, std::span<const int64_t> slots,
                     const float* grads, float lr, int64_t update) {
        rows_->update_late(opt, slots, grads, lr, update);
    }
    void unpin() { rows_->end_step(); }
    void prefetch(std::span<const int64_t> slots) { rows_->prefetch(slots); }
    // The tier (embedding.tier), or null.
    RowTier* tier() { return rows_->tier(); }
    const RowTier* tier() const { return rows_->tier(); }
    // The shared row unadmitted ids read with UnadmittedRow::kDefaultRow (else null).
    const float* default_row() const;
    SparseRowStorage default_storage();
    float* default_state();

    // Ends the current step: evicts (Note [Eviction]) and counts the step. The ids that left,
    // ascending.
    std::vector<uint64_t> end_step();
    // Ids evicted since the last call, ascending; the log is emptied.
    std::vector<uint64_t> take_evicted();
    const std::vector<uint64_t>& evicted() const { return evicted_; }

    DynamicTableStats stats() const;

    // Every field that the next steps depend on, for checkpoints (Note [Dynamic table state]).
    struct Saved {
        std::vector<uint64_t> words;
        std::vector<float> weights, state;
    };
    Saved save() const;
    void restore(const Saved& s);
    // Adds the rows, pending ids and evictions of s whose id `keep` accepts (another rank
    // count's part, Note [Dynamic table state]); takes s's step and default row, and adds its
    // admission and eviction counts when `counters`.
    void merge(const Saved& s, const std::function<bool(uint64_t)>& keep, bool counters);

    // Incremental checkpoints (Note [Incremental table state], dynamic_table_delta.cpp).
    // track_changes(true) also logs the ids that leave (8 bytes each until the next mark), which
    // save_delta() needs; off by default. mark_saved(): the state as of now is in a checkpoint,
    // changes are counted from here (restore() and merge() mark too).
    void track_changes(bool on);
    void mark_saved();
    // The rows admitted, updated or moved since the mark, the ids that left, and the small state
    // written whole (pending ids, counters, eviction log's new part, default row).
    Saved save_delta() const;
    // base (a save() of the state at the delta's mark) advanced to the state save_delta() saw.
    void apply_delta(Saved& base, const Saved& delta) const;
    // Whether a block's words are a save_delta() (else a save()).
    static bool is_delta(const std::vector<uint64_t>& words);

  private:
    // The words' formats (Note [Dynamic table state], Note [Incremental table state]).
    static constexpr uint64_t kSaveVersion = 1, kDeltaVersion = 2;
    static constexpr int64_t kSaveHeader = 8, kDeltaHeader = 13;  // words
    struct View {                                                 // a save()'s fields, checked
        int64_t n = 0, p = 0, e = 0;
        bool def = false;
        const uint64_t *ids, *seen, *count;
        const uint64_t *pending, *pending_count, *pending_seen;
        const uint64_t* evicted;
    };
    View view(const Saved& s) const;
    int64_t admit(uint64_t id, int64_t count);
    // Removes the row at slot, the last row moving into its place; origin: the slot each row
    // moved in this step came from (for DynamicRows::compact), dropped: the slots it held.
    void remove_row(int64_t slot, std::unordered_map<int64_t, int64_t>& origin,
                    std::vector<int64_t>& dropped);
    void remove_pending(int64_t i);
    void grow(int64_t rows);
    void init_row(uint64_t id, float* dst) const;

    MemoryPool& pool_;
    DynamicTableOptions options_;
    int64_t state_cols_ = 0;
    int64_t step_ = 0;
    // Rows, dense in [0, rows()): id, last step seen, sightings; values and state in w_, s_.
    U64Map index_;
    std::vector<uint64_t> ids_;
    std::vector<int64_t> last_seen_, count_;
    std::unique_ptr<DynamicRows> rows_;  // values and state by slot
    int64_t capacity_ = 0;               // slots
    Tensor default_w_, default_s_;
    // Pending ids: counted, not admitted (dense, like the rows).
    U64Map pending_index_;
    std::vector<uint64_t> pending_ids_;
    std::vector<int64_t> pending_seen_, pending_count_;
    int64_t admissions_ = 0, evictions_ = 0;
    std::vector<uint64_t> evicted_;
    // Since the last mark_saved(): per slot, whether the row changed (admitted, sighted, moved);
    // the ids that left (when tracking); evicted_ is the first log_kept_ entries of the log at
    // the mark, then left_[log_from_, ...) (an export empties the log: log_kept_ 0). And the
    // rows and step at the mark, which a delta's base must have.
    std::vector<uint8_t> changed_;
    bool track_ = false;
    std::vector<uint64_t> left_;
    int64_t log_kept_ = 0, log_from_ = 0;
    int64_t mark_rows_ = 0, mark_step_ = 0;
};

}  // namespace zt
