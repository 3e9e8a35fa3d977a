#include "planner/sparse_times.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "data/click/zipf.h"
#include "embedding/shard_plan.h"
#include "embedding/sharded_tables.h"
#include "optim/sparse_rows.h"
#include "planner/shape_times.h"
#include "util/error.h"
#include "util/radix_sort.h"
#include "util/random.h"
#include "util/timer.h"

namespace zt {

// Note [Sparse step by shape]
// A sharded table's micro-batch is not one kernel: the batch's ids are deduplicated, their rows
// travel from the owners into a small table of the distinct rows, pooled there; backward sends
// each distinct row's gradient back to its owner, which merges them per row; the step's sparse
// optimizer updates the rows used. On the DLRM example with row-sharded tables (8 tables, 512
// samples) that machinery was ~0.65 ms of a 1.8 ms step that the kernel shapes alone predicted at
// 1.1 ms (session 23; docs/benchmarks-planner.md). So each sharded table is timed as a whole,
// once per machine, thread count and shape, on one rank: the engine's ShardedTables with one
// table-wise table, micro-batches of ids drawn from the data's Zipf over the table's rows
// (scattered over the rows, as synth-ctr does), their distinct-id index made beforehand (the data
// thread's work in a run), then lookup, backward, the update and the gradients' reset, per
// micro-batch. A table past 8M elements is timed on 8M, as a lookup is. Over several ranks a
// rank's share is taken as this (its micro-batch's lookups; the rows it serves are the other
// ranks' shares of theirs). The same draws give what a micro-batch exchanges: its distinct ids
// (requested from their owners) and their rows' floats (sent back, and their gradients sent
// again in backward), kept beside the time; the cost model turns them into the all-to-alls'
// time over the data-parallel ranks (Note [Sparse exchange time] in cost_model.cpp).

namespace {

constexpr int64_t kTableCap = int64_t{8} << 20;  // elements of the timed table
constexpr int kBatches = 8;                      // distinct micro-batches cycled through

struct SparseTimed {
    double seconds = 0;
    SparseExchange exchange;  // per micro-batch, the mean over the drawn batches
};

SparseTimed time_sparse(const SparseShape& s, double min_s) {
    const int64_t B = std::max<int64_t>(1, s.bags), per = std::max<int64_t>(1, s.per_bag);
    const SparseOptimKind kind = parse_sparse_optim(s.optimizer);
    const size_t nt = s.tables.size();
    std::vector<EmbeddingTableSpec> specs;
    std::vector<int64_t> rows;
    for (size_t k = 0; k < nt; ++k) {
        const int64_t D = std::max<int64_t>(1, s.tables[k].second);
        rows.push_back(std::max<int64_t>(1, std::min(s.tables[k].first, kTableCap / D)));
        specs.push_back({str_cat("timed.", k), rows.back(), D, static_cast<double>(per)});
    }
    EmbeddingPlanOptions po;
    po.sharding = {ShardKind::kTable};
    po.samples_per_rank = B;
    po.state_floats_per_row = sparse_state_per_row(kind, specs.front().dim);
    EmbeddingPlan plan = plan_embeddings(specs, po);
    MemoryPool pool;
    ShardedTablesOptions so;
    so.optimizer.kind = kind;
    so.lr = 0.01;
    ShardedTables tables(pool, std::move(plan),
                         std::vector<ParamInit>(nt, ParamInit::uniform(0.01f)), nullptr, so);
    // Ids per table: Zipf ranks scattered by r -> (a r + c) mod R with a coprime to R.
    Rng rng(20261206);
    auto uni = [&rng] { return rng.uniform(); };
    const int64_t nnz = B * per;
    // [batch][table]
    std::vector<std::vector<std::vector<int64_t>>> ids(kBatches), distinct(kBatches);
    std::vector<std::vector<std::vector<int32_t>>> index(kBatches);
    std::vector<uint64_t> keys, tmp;
    for (size_t k = 0; k < nt; ++k) {
        const int64_t R = rows[k];
        const ZipfSampler zipf(R, s.zipf);
        uint64_t a = 2654435761u % static_cast<uint64_t>(R);
        while (R > 1 && (a == 0 || std::gcd(a, static_cast<uint64_t>(R)) != 1)) ++a;
        for (int b = 0; b < kBatches; ++b) {
            ids[b].emplace_back(static_cast<size_t>(nnz));
            for (int64_t& id : ids[b].back()) {
                const auto r = static_cast<uint64_t>(zipf.sample(uni) - 1);
                id = static_cast<int64_t>((a * r + 12345) % static_cast<uint64_t>(R));
            }
            distinct[b].emplace_back();
            index[b].emplace_back();
            index_distinct(ids[b].back(), distinct[b].back(), index[b].back(), keys, tmp);
        }
    }
    SparseTimed out;
    for (int b = 0; b < kBatches; ++b)
        for (size_t k = 0; k < nt; ++k) {
            const auto d = static_cast<double>(distinct[b][k].size());
            out.exchange.ids += d / kBatches;
            out.exchange.floats += d * static_cast<double>(s.tables[k].second) / kBatches;
        }
    std::vector<int64_t> offsets(static_cast<size_t>(B + 1));
    for (int64_t i = 0; i <= B; ++i) offsets[i] = i * per;
    std::vector<int> which(nt);
    std::iota(which.begin(), which.end(), 0);
    const std::vector<ops::BagPooling> pooling(nt, ops::BagPooling::kSum);
    int64_t update = 0;
    out.seconds = seconds_per_call(
        [&] {
            const auto b = static_cast<size_t>(update % kBatches);
            ClickBatch batch;
            batch.B = B;
            for (size_t k = 0; k < nt; ++k) {
                batch.ids.emplace_back(ids[b][k]);
                batch.offsets.emplace_back(offsets);
                batch.weights.emplace_back();
                batch.distinct.emplace_back(distinct[b][k]);
                batch.distinct_index.emplace_back(index[b][k]);
            }
            Tape tape(pool);
            std::vector<Var> out = tables.lookup(tape, which, batch, pooling);
            Var sum = out.front();  // every pooled table gets a gradient, as in the model
            for (size_t k = 1; k < out.size(); ++k) sum = ops::add(tape, sum, out[k]);
            Tensor g =
                Tensor::empty(pool, sum->value.shape(), DType::kF32, MemCategory::kActivations);
            std::fill(g.data<float>(), g.data<float>() + g.numel(), 1e-3f);
            tape.backward_from(std::move(sum), g);
            tables.finish_grads();
            tables.grad_sq_sum();  // the step's gradient norm (clipping, metrics)
            tables.step(0.01, 0.01, ++update);
            tables.zero_grads();
        },
        min_s);
    return out;
}

// " r2000d16 r1000d16 ...": the shape's tables, as its profile keys end.
std::string tables_words(const SparseShape& s) {
    std::string out;
    for (const auto& [rows, dim] : s.tables) out += str_cat(" r", rows, "d", dim);
    return out;
}

}  // namespace

std::string sparse_time_key(int threads, const SparseShape& s) {
    return str_cat("sparse f32 t", threads, " ", s.bags, "x", s.per_bag, " z", s.zipf, " ",
                   s.optimizer, tables_words(s));
}

namespace {

// The profile's keys of what a shape's micro-batch exchanges (no thread count: the draws are the
// same at any).
std::string exchange_key(const char* what, const SparseShape& s) {
    return str_cat("sparse ", what, " ", s.bags, "x", s.per_bag, " z", s.zipf, tables_words(s));
}

}  // namespace

std::optional<SparseExchange> sparse_shapes_exchange(const MachineProfile& p,
                                                     std::span<const SparseShape> shapes) {
    SparseExchange sum;
    for (const SparseShape& x : shapes) {
        const auto ids = p.shape_s.find(exchange_key("ids", x));
        const auto floats = p.shape_s.find(exchange_key("floats", x));
        if (ids == p.shape_s.end() || floats == p.shape_s.end()) return std::nullopt;
        sum.ids += ids->second;
        sum.floats += floats->second;
    }
    return sum;
}

std::optional<double> sparse_shapes_seconds(const MachineProfile& p, int threads,
                                            std::span<const SparseShape> shapes) {
    double sec = 0;
    for (const SparseShape& x : shapes) {
        auto it = p.shape_s.find(sparse_time_key(threads, x));
        if (it == p.shape_s.end()) return std::nullopt;
        sec += it->second;
    }
    return sec;
}

int measure_sparse_shapes(MachineProfile& p, int threads, std::span<const SparseShape> shapes,
                          double seconds_each) {
    const ThreadCountScope scope(threads);
    int measured = 0;
    for (const SparseShape& x : shapes) {
        const std::string key = sparse_time_key(threads, x);
        const bool empty = std::any_of(x.tables.begin(), x.tables.end(),
                                       [](const auto& t) { return t.first <= 0 || t.second <= 0; });
        const std::string ids = exchange_key("ids", x), floats = exchange_key("floats", x);
        if (x.bags <= 0 || x.tables.empty() || empty) continue;
        if (p.shape_s.count(key) && p.shape_s.count(ids) && p.shape_s.count(floats)) continue;
        const SparseTimed t = time_sparse(x, seconds_each);
        p.shape_s[key] = t.seconds;
        p.shape_s[ids] = t.exchange.ids;
        p.shape_s[floats] = t.exchange.floats;
        ++measured;
    }
    return measured;
}

}  // namespace zt
