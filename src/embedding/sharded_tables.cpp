// ShardedTables: shard storage, initialization, gradient merging and the sparse update (the
// lookups are in embedding_exchange.cpp). See sharded_tables.h.
#include "embedding/sharded_tables.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>

#include "comm/communicator.h"
#include "embedding/sharded_tables_detail.h"
#include "offload/host_store.h"
#include "offload/nvme_store.h"
#include "tensor/threads.h"
#include "util/error.h"
#include "util/radix_sort.h"
#include "util/random.h"
#include "util/timer.h"
#include "util/units.h"

namespace zt {

void ShardedTables::RowAcc::add(int64_t row, const float* g, int64_t cols) {
    rows.push_back(row);
    grads.insert(grads.end(), g, g + cols);
}

void ShardedTables::RowAcc::clear() {
    rows.clear();
    grads.clear();
}

// Note [Cache split]: cache_bytes over a rank's shards by water-filling: every shard's lookups a
// step are alike (one id per sample and table), so small shards, which a few bytes cache whole,
// are served first: in ascending size, a shard smaller than an equal share of what is left is
// cached whole, and the shards left share the rest in proportion to their bytes.
std::vector<double> split_cache_bytes(const std::vector<double>& bytes, double budget) {
    std::vector<size_t> order(bytes.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return bytes[a] < bytes[b]; });
    std::vector<double> ratio(bytes.size(), 1.0);
    size_t k = 0;
    for (; k < order.size(); ++k) {
        const double share = budget / static_cast<double>(order.size() - k);
        if (bytes[order[k]] > share) break;
        budget -= bytes[order[k]];
    }
    double rest = 0;
    for (size_t j = k; j < order.size(); ++j) rest += bytes[order[j]];
    for (size_t j = k; j < order.size(); ++j)
        ratio[order[j]] = rest > 0 ? std::min(1.0, budget / rest) : 1.0;
    return ratio;
}

ShardedTables::ShardedTables(MemoryPool& pool, EmbeddingPlan plan, std::vector<ParamInit> inits,
                             Communicator* comm, const ShardedTablesOptions& options)
    : pool_(pool),
      plan_(std::move(plan)),
      // One rank exchanges nothing: the tables run their no-communicator path, without a
      // handoff to the communicator's thread for each of a step's five exchanges (the DLRM
      // example's embedding.alltoall_s 0.29-0.32 -> 0.09 ms a step, docs/benchmarks-planner.md).
      comm_(comm && comm->size() > 1 ? comm : nullptr),
      options_(options),
      optimizer_(options.optimizer),
      rank_(comm ? comm->rank() : 0),
      ranks_(comm ? comm->size() : 1) {
    ZT_CHECK(options_.storage == DType::kF32 || options_.storage == DType::kBF16,
             "embedding.dtype: tables are stored as fp32 or bf16 (split-SGD halves), got ",
             dtype_name(options_.storage));
    ZT_ASSERT(inits.size() == plan_.tables.size(), "one init per table");
    ZT_CHECK(!options_.tier.on() || options_.storage == DType::kF32,
             "embedding.tier: tiered tables keep fp32 rows; use embedding.dtype \"fp32\"");
    if (options_.forward_comm != CodecKind::kF32) {
        fwd_codec_ = make_codec({options_.forward_comm, 256, 0.01});
        fwd_a2a_ = std::make_unique<CompressedAllToAll>(*fwd_codec_);
    }
    if (options_.backward_comm != CodecKind::kF32) {
        bwd_codec_ = make_codec({options_.backward_comm, 256, 0.01});
        bwd_a2a_ = std::make_unique<CompressedAllToAll>(*bwd_codec_);
    }
    if (options_.staleness > 0 && comm_ && ranks_ > 1)  // collective: every rank builds them
        stale_comm_ = comm_->split(0, rank_);
    shard_of_table_.assign(plan_.tables.size(), -1);
    for (size_t k = 0; k < plan_.tables.size(); ++k) {
        if (!plan_.sharded(k)) continue;
        sharded_.push_back(static_cast<int>(k));
        ZT_CHECK(!(plan_.placement[k].kind == ShardKind::kColumn &&
                   options_.optimizer.kind == SparseOptimKind::kRowwiseAdagrad),
                 "embedding: table ", plan_.tables[k].name,
                 " is split by columns, and row-wise Adagrad keeps one accumulator per whole "
                 "row; use \"adagrad\" or \"sgd\", or row or table sharding for it");
        const TableShard* ts = plan_.shard_on(k, rank_);
        if (ts == nullptr) continue;
        auto s = std::make_unique<Shard>();
        s->table = static_cast<int>(k);
        s->range = *ts;
        s->acc.resize(static_cast<size_t>(ranks_));
        shard_of_table_[k] = static_cast<int>(shards_.size());
        shards_.push_back(std::move(s));
    }
    // The cache of each shard: cache_ratio of its rows, or its part of cache_bytes.
    std::vector<double> ratio(shards_.size(), options_.tier.cache_ratio);
    if (options_.tier.on() && options_.tier.cache_bytes > 0) {
        std::vector<double> bytes;
        for (const auto& s : shards_) {
            const int64_t cols = s->range.col_end - s->range.col_begin;
            bytes.push_back(
                static_cast<double>(s->range.row_end - s->range.row_begin) *
                static_cast<double>(RowTier::record_floats(cols, optimizer_.state_per_row(cols))) *
                4.0);
        }
        ratio = split_cache_bytes(bytes, static_cast<double>(options_.tier.cache_bytes));
    }
    for (size_t i = 0; i < shards_.size(); ++i) {
        init_shard(*shards_[i], inits[static_cast<size_t>(shards_[i]->table)], ratio[i]);
        if (shards_[i]->tier) tier_capacity_ += shards_[i]->tier->capacity();
    }
}

ShardedTables::~ShardedTables() {
    try {
        auto wait_all = [](StepGrads& list) {  // their buffers are about to go
            for (auto& p : list)
                if (p->handle) p->handle->wait();
        };
        wait_all(stale_);
        for (StepGrads& list : held_) wait_all(list);
        complete_grads();  // the buffers it writes into are about to go
    } catch (...) {        // a failed exchange is reported where it happened
    }
}

namespace {

constexpr int64_t kInitChunkRows = 1 << 14;  // a tiered shard is initialized this many rows at once

}  // namespace

void ShardedTables::init_tiered_shard(Shard& s, const ParamInit& init, double ratio) {
    const EmbeddingTableSpec& t = plan_.tables[static_cast<size_t>(s.table)];
    const int64_t rows = s.storage.rows, cols = s.storage.cols;
    const int64_t sc = optimizer_.state_per_row(cols);
    s.tier = std::make_unique<RowTier>(
        pool_, t.name, rows, cols, sc, tier_cache_rows(rows, ratio), options_.tier.policy,
        make_row_store(
            options_.tier.device, options_.tier.nvme_path, options_.tier.queue_depth,
            str_cat("embedding-", t.name, "-", s.range.row_begin, "-", s.range.col_begin),
            RowTier::store_bytes(rows, cols, sc)));
    const uint64_t stream = hash_string(t.name);
    std::vector<float> w, state;
    for (int64_t r0 = 0; r0 < rows; r0 += kInitChunkRows) {
        const int64_t n = std::min(kInitChunkRows, rows - r0);
        w.resize(static_cast<size_t>(n * cols));
        state.assign(static_cast<size_t>(n * sc), sparse_state_initial(options_.optimizer));
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < n; ++r) {
            const int64_t g = (s.range.row_begin + r0 + r) * t.dim + s.range.col_begin;
            for (int64_t c = 0; c < cols; ++c)
                w[static_cast<size_t>(r * cols + c)] =
                    param_init_value(init, options_.seed, stream, g + c);
        }
        s.tier->write_range(r0, n, w.data(), sc > 0 ? state.data() : nullptr);
    }
}

void ShardedTables::init_shard(Shard& s, const ParamInit& init, double ratio) {
    const EmbeddingTableSpec& t = plan_.tables[static_cast<size_t>(s.table)];
    const int64_t rows = s.range.row_end - s.range.row_begin;
    const int64_t cols = s.range.col_end - s.range.col_begin;
    s.storage.rows = rows;
    s.storage.cols = cols;
    if (options_.tier.on()) {
        init_tiered_shard(s, init, ratio);
        return;
    }
    MemScope scope(pool_, t.name, MemPhase::kOther);
    if (options_.storage == DType::kF32) {
        s.w = Tensor::empty(pool_, {rows, cols}, DType::kF32, MemCategory::kEmbedding);
        s.storage.f32 = s.w.data<float>();
    } else {  // the two halves as 16-bit tensors
        s.hi = Tensor::empty(pool_, {rows, cols}, DType::kBF16, MemCategory::kEmbedding);
        s.lo = Tensor::empty(pool_, {rows, cols}, DType::kBF16, MemCategory::kEmbedding);
        s.storage.hi = reinterpret_cast<uint16_t*>(s.hi.raw());
        s.storage.lo = reinterpret_cast<uint16_t*>(s.lo.raw());
    }
    const int64_t sc = optimizer_.state_per_row(cols);
    if (sc > 0) {
        s.state = Tensor::empty(pool_, {rows, sc}, DType::kF32, MemCategory::kEmbedding);
        std::fill_n(s.state.data<float>(), rows * sc, sparse_state_initial(options_.optimizer));
    }
    const uint64_t stream = hash_string(t.name);
    const uint64_t seed = options_.seed;
#pragma omp parallel
    {
        std::vector<float> row(static_cast<size_t>(cols));
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t g = (s.range.row_begin + r) * t.dim + s.range.col_begin;
            for (int64_t c = 0; c < cols; ++c) row[c] = param_init_value(init, seed, stream, g + c);
            s.storage.write_row(r, row.data());
        }
    }
}

ShardedTables::Shard* ShardedTables::local_shard(int table) {
    const int i = shard_of_table_[static_cast<size_t>(table)];
    return i < 0 ? nullptr : shards_[static_cast<size_t>(i)].get();
}

namespace {

constexpr int64_t kParallelMinFloats = 1 << 14;         // merges and sums below this: one thread
constexpr size_t kTierFigures = RowTierStats::kFields;  // finish_grads' tier counters of a rank

}  // namespace

// Note [Merge order]: the gradient of a row is the sum over requesting ranks, in rank order, of
// that rank's sum over its micro-batches, each micro-batch's part summed from zero in position
// order (the embedding_bag backward). That is the order in which the dense data-parallel path
// accumulates a replicated table's gradient and then reduces it over ranks (comm/communicator.h:
// ((x_0 + x_1) + x_2) ...), so a sharded table takes the same update bits as the dense run.
// Note [Merge order] by sorting: every (row, arrival) of every source gets a key (local row,
// index in source-major arrival order); a stable radix sort by row puts a row's gradients
// together, ordered by source and then arrival. Each distinct row is then one thread's: it sums
// a source's gradients from zero in arrival order and adds that sum into the row's total, sources
// in rank order, which is the accumulate-then-reduce order of the dense path.
void ShardedTables::merge_grads(Shard& s) {
    const int64_t cols = s.storage.cols;
    size_t entries = 0;
    for (const RowAcc& a : s.acc) entries += a.rows.size();
    ZT_ASSERT(entries < (size_t{1} << 32) && s.storage.rows < (int64_t{1} << 31),
              "too many gradient rows for one shard in one step");
    std::vector<uint64_t>& keys = merge_keys_;  // members: reused step after step
    std::vector<const float*>& grad = merge_grad_;
    std::vector<int32_t>& source = merge_source_;
    keys.resize(entries);
    grad.resize(entries);
    source.resize(entries);
    size_t e = 0;
    for (size_t src = 0; src < s.acc.size(); ++src) {
        const RowAcc& a = s.acc[src];
        for (size_t j = 0; j < a.rows.size(); ++j, ++e) {
            ZT_ASSERT(a.rows[j] >= 0 && a.rows[j] < s.storage.rows,
                      "a gradient row outside the shard");
            keys[e] = static_cast<uint64_t>(a.rows[j]) << 32 | e;
            grad[e] = a.grads.data() + static_cast<int64_t>(j) * cols;
            source[e] = static_cast<int32_t>(src);
        }
    }
    radix_sort_field(keys, 32, bits_below(s.storage.rows), merge_tmp_);
    std::vector<int64_t> starts;  // first key of each distinct row, then the end
    for (size_t k = 0; k < entries; ++k)
        if (k == 0 || keys[k] >> 32 != keys[k - 1] >> 32) starts.push_back(static_cast<int64_t>(k));
    starts.push_back(static_cast<int64_t>(entries));
    const auto n = static_cast<int64_t>(starts.size()) - 1;
    s.merged_rows.resize(static_cast<size_t>(n));
    s.merged.assign(static_cast<size_t>(n * cols), 0.0f);
#pragma omp parallel if (n * cols >= parallel_min_elems(kParallelMinFloats))
    {
        std::vector<float> part(static_cast<size_t>(cols));
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n; ++r) {
            const auto k0 = static_cast<size_t>(starts[static_cast<size_t>(r)]);
            const auto k1 = static_cast<size_t>(starts[static_cast<size_t>(r) + 1]);
            s.merged_rows[static_cast<size_t>(r)] = static_cast<int64_t>(keys[k0] >> 32);
            float* dst = s.merged.data() + r * cols;
            for (size_t k = k0; k < k1;) {
                const int32_t src = source[keys[k] & 0xffffffffu];
                std::fill(part.begin(), part.end(), 0.0f);
                for (; k < k1 && source[keys[k] & 0xffffffffu] == src; ++k) {
                    const float* g = grad[keys[k] & 0xffffffffu];
                    for (int64_t c = 0; c < cols; ++c) part[static_cast<size_t>(c)] += g[c];
                }
                for (int64_t c = 0; c < cols; ++c) dst[c] += part[static_cast<size_t>(c)];
            }
        }
    }
    for (RowAcc& a : s.acc) a.clear();
}

// Note [Stale embedding updates]
// embedding.staleness s (Persia's hybrid training, bounded staleness): the dense part stays
// synchronous, and the tables' update from step k's gradient is applied at the end of step k + s,
// so lookups read rows that lack at most the last s steps' updates. What that buys: the gradient
// rows' all-to-alls of step k (one per micro-batch, each with buffers of its own) stay in flight
// through the next s steps' forward and backward, and are completed only at step k + s's
// finish_grads (the synchronous engine completes them at the next lookup), on a channel of their
// own (stale_comm_: a communicator runs its transfers in issue order, so on comm_ the next step's
// row fetch would wait behind them, measured 7-30% slower than synchronous on a 1 Gbit/s link,
// docs/benchmarks-compression.md). held_ is a queue of
// the steps in flight, oldest first: at each finish_grads this step's exchanges join it, and when
// it holds more than s steps the oldest lands. Step k + s then merges step k's rows in the same
// order as ever, and its step() applies them with step k + s's rate and update count; grad_sq_sum
// and clipping see them with step k + s's dense gradients. A checkpoint (and the end of training)
// applies every held step first, oldest first, each as its own update with the last step's rate
// and update count (apply_held), so a checkpoint holds every update, a resumed run starts with
// nothing held, and an uninterrupted run, which applies at the same checkpoint steps, follows the
// same trajectory bit for bit. Staleness 0 is the synchronous engine, unchanged. A step skipped
// for a non-finite loss drops the update it would have applied (the oldest held step's). Memory:
// s steps' gradient rows, sent and received, outside the budget.
//
// Note [Stale updates on a tier]
// With embedding.tier a synchronous step updates rows its own lookups fetched and pinned. A stale
// update lands on rows looked up s steps earlier, which the cache may have let go since: step()
// fetches them again for the update (RowTier::fetch_for_update: misses read from the store, not
// counted as lookups) and pins them with this step's rows until end_step, so the cache must hold
// both steps' rows of a shard (the run stops saying so when it cannot). The cache holds exact
// copies, so the trajectory is the in-memory tables' bit for bit. The held all-to-alls stay in
// flight as without a tier; the fetch of the landing rows is what a tier adds to the step.
void ShardedTables::finish_grads() {
    complete_grads();
    if (options_.staleness > 0) {  // this step's rows stay in flight; the oldest held land
        held_.push_back(std::move(stale_));
        stale_.clear();
        if (std::ssize(held_) > options_.staleness) {
            complete_stale(held_.front());
            held_.pop_front();
        }
    }
    // This rank's figures: rows touched per sharded table (a column split counts a row once, on
    // the shard holding column 0), then ids requested, bytes sent and seconds in the exchanges.
    const size_t nt = sharded_.size();
    std::vector<double> mine(nt + 7 + kTierFigures, 0.0);
    for (auto& sp : shards_) {
        merge_grads(*sp);
        if (sp->range.col_begin != 0) continue;
        const size_t i = static_cast<size_t>(
            std::find(sharded_.begin(), sharded_.end(), sp->table) - sharded_.begin());
        mine[i] += static_cast<double>(sp->merged_rows.size());
    }
    mine[nt] = static_cast<double>(acc_unique_ids_);
    mine[nt + 1] = static_cast<double>(acc_bytes_);
    mine[nt + 2] = acc_s_;
    mine[nt + 3] = static_cast<double>(acc_comm_stats_.raw_bytes);
    mine[nt + 4] = static_cast<double>(acc_comm_stats_.wire_bytes);
    mine[nt + 5] = acc_comm_stats_.error_sq;
    mine[nt + 6] = acc_comm_stats_.input_sq;
    const RowTierStats now = tier_totals();
    const std::array<double, kTierFigures> tier = (now - tier_before_).to_array();
    tier_before_ = now;
    std::copy(tier.begin(), tier.end(), mine.begin() + static_cast<std::ptrdiff_t>(nt + 7));
    acc_comm_stats_ = {};
    acc_unique_ids_ = acc_bytes_ = 0;
    acc_s_ = 0;
    // The group's figures: sums over ranks, the slowest rank's seconds. One small all-gather a
    // step; every rank calls finish_grads once a step.
    std::vector<double> all(mine.size() * static_cast<size_t>(ranks_));
    if (comm_)
        comm_
            ->all_gather(mine.data(), all.data(),
                         std::vector<int64_t>(static_cast<size_t>(ranks_),
                                              static_cast<int64_t>(mine.size())),
                         CommType::kF64)
            ->wait();
    else
        all = mine;
    table_rows_touched_.assign(nt, 0);
    rows_touched_ = unique_ids_ = alltoall_bytes_ = 0;
    alltoall_s_ = 0;
    comm_stats_ = {};
    for (int r = 0; r < ranks_; ++r) {
        const double* f = all.data() + static_cast<size_t>(r) * mine.size();
        for (size_t i = 0; i < nt; ++i) {
            table_rows_touched_[i] += static_cast<int64_t>(f[i]);
            rows_touched_ += static_cast<int64_t>(f[i]);
        }
        unique_ids_ += static_cast<int64_t>(f[nt]);
        alltoall_bytes_ += static_cast<int64_t>(f[nt + 1]);
        alltoall_s_ = std::max(alltoall_s_, f[nt + 2]);
        comm_stats_.raw_bytes += static_cast<int64_t>(f[nt + 3]);
        comm_stats_.wire_bytes += static_cast<int64_t>(f[nt + 4]);
        comm_stats_.error_sq += f[nt + 5];
        comm_stats_.input_sq += f[nt + 6];
        const double* t = f + nt + 7;
        if (r == 0) tier_step_ = {};
        const RowTierStats one = RowTierStats::from_array(t);
        const double slowest = std::max(tier_step_.stall_s, one.stall_s);
        tier_step_ += one;
        tier_step_.stall_s = slowest;  // the slowest rank's seconds, not the sum
    }
}

// Sums of squares per row in double, in parallel, then added in row order: the same bits for
// any thread count.
double ShardedTables::grad_sq_sum() const {
    double sum = 0;
    for (const auto& s : shards_) {
        const int64_t cols = s->storage.cols;
        const auto n = static_cast<int64_t>(s->merged_rows.size());
        std::vector<double> row_sum(static_cast<size_t>(n));
#pragma omp parallel for schedule(static) if (n * cols >= parallel_min_elems(kParallelMinFloats))
        for (int64_t r = 0; r < n; ++r) {
            double q = 0;
            const float* g = s->merged.data() + r * cols;
            for (int64_t c = 0; c < cols; ++c) q += static_cast<double>(g[c]) * g[c];
            row_sum[static_cast<size_t>(r)] = q;
        }
        for (double q : row_sum) sum += q;
    }
    return sum;
}

void ShardedTables::scale_grads(float coef) {
    for (auto& s : shards_) {
        const auto n = static_cast<int64_t>(s->merged.size());
        float* g = s->merged.data();
#pragma omp parallel for schedule(static) if (n >= parallel_min_elems(kParallelMinFloats))
        for (int64_t i = 0; i < n; ++i) g[i] *= coef;
    }
}

// Note [Small shards side by side]
// A shard whose update is too small to split over threads (SparseRowOptimizer::threads_rows)
// ran on one thread while the others waited, one shard after another: the 1x2 bf16 DLRM
// benchmark spent 2.9% of its step there (13 small tables). Such shards now update side by
// side, one per thread (the optimizer holds no state of its own, and each shard's rows are its
// own); the large ones keep their rows split over threads. Each row goes through the same
// kernel either way, so the bits are those of one thread.
void ShardedTables::step(double lr, double base_lr, int64_t update) {
    const double rate = options_.lr > 0 && base_lr > 0 ? options_.lr * (lr / base_lr) : lr;
    std::vector<Shard*> small;
    for (auto& s : shards_) {
        if (s->merged_rows.empty()) continue;
        mark_changed(*s);
        if (s->tier) {
            // Synchronous: every row the step updates was fetched by its lookups, and is pinned.
            // Stale: the update's rows were looked up s steps ago (Note [Stale updates on a tier]).
            slots_.resize(s->merged_rows.size());
            if (options_.staleness > 0)
                s->tier->fetch_for_update(s->merged_rows, slots_.data());
            else
                s->tier->resident_slots(s->merged_rows, slots_.data());
            SparseRowStorage cache = s->tier->cache_storage();
            optimizer_.step(cache, s->tier->cache_state(), slots_, s->merged.data(),
                            static_cast<float>(rate), update);
            s->tier->mark_dirty(slots_);
            continue;
        }
        if (!SparseRowOptimizer::threads_rows(static_cast<int64_t>(s->merged_rows.size()),
                                              s->storage.cols)) {
            small.push_back(s.get());
            continue;
        }
        step_shard(*s, static_cast<float>(rate), update);
    }
    const auto n = static_cast<int64_t>(small.size());
    std::exception_ptr failed;  // an exception must not leave the OpenMP region
#pragma omp parallel for schedule(dynamic) if (n > 1)
    for (int64_t i = 0; i < n; ++i) {
        try {
            step_shard(*small[static_cast<size_t>(i)], static_cast<float>(rate), update);
        } catch (...) {
#pragma omp critical(zt_small_shards)
            if (!failed) failed = std::current_exception();
        }
    }
    if (failed) std::rethrow_exception(failed);
}

void ShardedTables::step_shard(Shard& s, float rate, int64_t update) {
    float* state = s.state.defined() ? s.state.data<float>() : nullptr;
    optimizer_.step(s.storage, state, s.merged_rows, s.merged.data(), rate, update);
}

void ShardedTables::apply_held(double lr, double base_lr, int64_t update) {
    while (!held_.empty()) apply_oldest(lr, base_lr, update);
}

void ShardedTables::apply_oldest(double lr, double base_lr, int64_t update) {
    complete_stale(held_.front());
    held_.pop_front();
    for (auto& s : shards_) merge_grads(*s);
    step(lr, base_lr, update);
    for (auto& s : shards_) {
        if (s->tier) s->tier->end_step();  // between steps: each held update pins its own rows
        s->merged_rows.clear();
        s->merged.clear();
    }
}

void ShardedTables::zero_grads() {
    complete_grads();  // a step that skipped finish_grads still clears what was sent
    for (auto& s : shards_) {
        if (s->tier) s->tier->end_step();
        for (RowAcc& a : s->acc) a.clear();
        s->merged_rows.clear();
        s->merged.clear();
    }
}

// Collective over the group (every rank calls it at the same point: right after the same
// lookup): each rank sends the owners its next micro-batch's distinct ids of `tables` (one small
// all-to-all of counts and one of (table, row) requests, as a lookup's first two), and every
// owner reads ahead the rows any rank will ask it for (Note [Row prefetch]).
void ShardedTables::prefetch(const ClickBatch& next, std::span<const int> tables) {
    if (!options_.tier.on()) return;
    Stopwatch timer;
    const bool indexed = next.distinct.size() == next.ids.size();
    if (next.ids.empty()) tables = {};  // no batch on this rank: it only answers
    std::vector<int64_t> own;
    std::vector<int32_t> own_index;
    std::vector<uint64_t> keys, tmp;
    std::vector<std::vector<int64_t>> send(static_cast<size_t>(ranks_));
    for (int t : tables) {
        if (!indexed) index_distinct(next.ids[static_cast<size_t>(t)], own, own_index, keys, tmp);
        const std::span<const int64_t> ids =
            indexed ? next.distinct[static_cast<size_t>(t)] : std::span<const int64_t>(own);
        for (int64_t id : ids)  // an id outside the table is the lookup's to report
            for (const TableShard& sh : plan_.placement[static_cast<size_t>(t)].shards)
                if (id >= sh.row_begin && id < sh.row_end)
                    send[static_cast<size_t>(sh.rank)].push_back(pack_request(t, id));
    }
    std::vector<int64_t> flat, send_counts(static_cast<size_t>(ranks_)), recv_counts, requests;
    for (int r = 0; r < ranks_; ++r) {
        const auto ru = static_cast<size_t>(r);
        send_counts[ru] = static_cast<int64_t>(send[ru].size());
        flat.insert(flat.end(), send[ru].begin(), send[ru].end());
        if (r != rank_) acc_bytes_ += 8 + send_counts[ru] * 8;
    }
    exchange_requests(send_counts, flat, recv_counts, requests);
    std::vector<std::vector<int64_t>> rows(shards_.size());
    for (int64_t q : requests) {
        const int i = shard_of_table_[static_cast<size_t>(request_table(q))];
        ZT_ASSERT(i >= 0, "a read-ahead request for a table this rank holds no shard of");
        rows[static_cast<size_t>(i)].push_back(request_row(q) -
                                               shards_[static_cast<size_t>(i)]->range.row_begin);
    }
    for (size_t i = 0; i < shards_.size(); ++i)
        if (shards_[i]->tier) shards_[i]->tier->prefetch(rows[i]);  // none: drops the last ones
    acc_s_ += timer.elapsed_s();
}

RowTierStats ShardedTables::tier_totals() const {
    RowTierStats t;
    for (const auto& s : shards_)
        if (s->tier) t += s->tier->stats();
    return t;
}

void ShardedTables::on_tier_writeback(std::function<void()> hook) {
    for (auto& s : shards_)
        if (s->tier) s->tier->on_writeback(hook);
}

std::vector<std::string> ShardedTables::names() const {
    std::vector<std::string> out;
    for (int k : sharded_) out.push_back(plan_.tables[static_cast<size_t>(k)].name);
    return out;
}

Shape ShardedTables::shape(size_t i) const {
    const EmbeddingTableSpec& t = plan_.tables[static_cast<size_t>(sharded_.at(i))];
    return {t.rows, t.dim};
}

int64_t ShardedTables::state_cols(size_t i) const { return optimizer_.state_per_row(shape(i)[1]); }

int64_t ShardedTables::numel() const {
    int64_t n = 0;
    for (int k : sharded_)
        n += plan_.tables[static_cast<size_t>(k)].rows * plan_.tables[static_cast<size_t>(k)].dim;
    return n;
}

std::vector<std::string> ShardedTables::describe() const {
    std::vector<std::string> lines = plan_.describe();
    if (options_.tier.on()) {
        int64_t rows = 0, bytes = 0;
        for (const auto& s : shards_) {
            rows += s->tier->rows();
            bytes += s->tier->cache_bytes();
        }
        lines.push_back(
            str_cat("embedding.tier: this rank's ", rows, " rows on ", options_.tier.device,
                    options_.tier.device == "nvme" ? str_cat(" (", options_.tier.nvme_path, ")")
                                                   : std::string(),
                    " behind a ", row_cache_policy_name(options_.tier.policy), " cache of ",
                    tier_capacity_, " rows (", format_bytes(static_cast<double>(bytes)), ")"));
    }
    lines.push_back(str_cat("embedding: sharded tables stored as ",
                            options_.storage == DType::kF32 ? "fp32" : "bf16 (split-SGD halves)",
                            ", updated by sparse ", sparse_optim_name(options_.optimizer.kind)));
    return lines;
}

nlohmann::json ShardedTables::plan_json() const {
    nlohmann::json j = plan_.to_json();
    j["storage"] = options_.storage == DType::kF32 ? "fp32" : "bf16";
    j["optimizer"] = sparse_optim_name(options_.optimizer.kind);
    return j;
}

nlohmann::json ShardedTables::step_counters() const {
    nlohmann::json tables = nlohmann::json::object();
    for (size_t i = 0; i < sharded_.size() && i < table_rows_touched_.size(); ++i)
        tables[plan_.tables[static_cast<size_t>(sharded_[i])].name] = table_rows_touched_[i];
    nlohmann::json j = {{"embedding_rows_touched", rows_touched_},
                        {"embedding_unique_ids", unique_ids_},
                        {"alltoall_bytes", alltoall_bytes_},
                        {"alltoall_s", alltoall_s_},
                        {"rows_touched", tables}};
    if (options_.tier.on()) {
        // embedding.tier (docs/embedding-tier.md): the step's fetches over the group.
        j["tier"] = tier_step_.metrics();
        j["tier"]["device"] = options_.tier.device;
        j["tier"]["policy"] = row_cache_policy_name(options_.tier.policy);
        j["tier"]["cache_rows"] = tier_capacity_;
    }
    if (fwd_codec_ || bwd_codec_) {
        // The compressed row and gradient exchanges (docs/compression.md), as the gradients'
        // compression entry reports them: what the plain all-to-alls would have sent, and sent.
        nlohmann::json c = {{"forward", codec_kind_name(options_.forward_comm)},
                            {"backward", codec_kind_name(options_.backward_comm)}};
        j["comm_compression"] = add_compression_json(c, comm_stats_);
    }
    return j;
}

}  // namespace zt
