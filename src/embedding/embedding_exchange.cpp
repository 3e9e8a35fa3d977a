// Lookups of sharded tables: the forward and backward all-to-alls (Note [Unique-row exchange]).
#include <algorithm>
#include <cstring>

#include "comm/communicator.h"
#include "embedding/sharded_tables_detail.h"
#include "util/error.h"
#include "util/timer.h"

// Note [Unique-row exchange]
// A requesting rank sorts and deduplicates each table's ids of its micro-batch and asks each
// distinct row's owner for it (column-wise: every column owner for its columns) in one all-to-all
// of packed (table, row) requests, after one of their counts. Owners reply with the rows in a
// second all-to-all. The requester lays the fetched rows of a table out as a small table of its
// distinct rows, renumbers the ids into it and pools with the ordinary embedding_bag op, so the
// pooling (sum or mean, per-sample weights, empty bags) is the one-process computation, bit for
// bit, for every sharding, row-wise included. Its backward gives the gradient of each distinct
// row (summed from zero in position order), which a third all-to-all returns to the owner.
// Compared with pooling on the owner (TorchRec's table-wise path) this sends D floats per
// distinct id instead of per bag: the same for one-hot features, less on skewed (Zipf) ids, more
// for long multi-hot bags; OneFlow's OneEmbedding exchanges unique rows the same way.

namespace zt {

struct ShardedTables::Exchange {
    struct Req {
        int32_t list;  // index into the lookup's tables
        int32_t u;     // row of the compact table
        int64_t c0, c1;
    };
    std::vector<Var> compact;                 // per listed table: (U, dim) fetched rows
    std::vector<std::vector<Req>> to_owner;   // requester: per owner, in send order
    std::vector<int64_t> reply_counts;        // requester: floats each owner sent
    std::vector<int64_t> recv_requests;       // owner: every rank's requests, in rank order
    std::vector<int64_t> recv_counts;         // owner: requests per source
    std::vector<int64_t> serve_counts;        // owner: floats sent per source
};

namespace {

// Elements of v summed: an all-to-all's total count.
int64_t total(const std::vector<int64_t>& v) {
    int64_t n = 0;
    for (int64_t x : v) n += x;
    return n;
}

}  // namespace

void ShardedTables::serve_rows(std::span<const int64_t> requests,
                               std::vector<float>& reply) const {
    for (int64_t q : requests) {
        const int t = request_table(q);
        const int i = shard_of_table_[static_cast<size_t>(t)];
        ZT_ASSERT(i >= 0, "a request for table ", t, " on a rank without its shard");
        const Shard& s = *shards_[static_cast<size_t>(i)];
        const int64_t r = request_row(q) - s.range.row_begin;
        ZT_ASSERT(r >= 0 && r < s.storage.rows, "a request for a row outside the shard");
        const int64_t cols = s.storage.cols;
        const size_t at = reply.size();
        reply.resize(at + static_cast<size_t>(cols));
        float* dst = reply.data() + at;
        if (!s.storage.split()) {
            std::memcpy(dst, s.storage.f32 + r * cols, static_cast<size_t>(cols) * sizeof(float));
        } else {  // lookups read the bf16 high half
            const uint16_t* hi = s.storage.hi + r * cols;
            for (int64_t c = 0; c < cols; ++c) {
                const uint32_t bits = static_cast<uint32_t>(hi[c]) << 16;
                std::memcpy(dst + c, &bits, sizeof(float));
            }
        }
    }
}

void ShardedTables::accept_grads(int source, std::span<const int64_t> requests,
                                 const float* grads) {
    for (int64_t q : requests) {
        Shard* s = local_shard(request_table(q));
        ZT_ASSERT(s != nullptr, "a gradient for a table this rank holds no shard of");
        const int64_t cols = s->storage.cols;
        s->acc[static_cast<size_t>(source)].add(request_row(q) - s->range.row_begin, grads, cols);
        grads += cols;
    }
}

std::vector<Var> ShardedTables::lookup(Tape& tape, std::span<const int> tables,
                                       const ClickBatch& batch,
                                       std::span<const ops::BagPooling> pooling) {
    ZT_ASSERT(tables.size() == pooling.size(), "one pooling per table");
    Stopwatch timer;
    auto ex = std::make_shared<Exchange>();
    ex->to_owner.resize(static_cast<size_t>(ranks_));
    std::vector<std::vector<int64_t>> send(static_cast<size_t>(ranks_));
    std::vector<std::vector<int32_t>> compact_ids(tables.size());
    std::vector<int64_t> uniques(tables.size());
    for (size_t i = 0; i < tables.size(); ++i) {
        const int t = tables[i];
        const EmbeddingTableSpec& spec = plan_.tables[static_cast<size_t>(t)];
        const TablePlacement& place = plan_.placement[static_cast<size_t>(t)];
        std::span<const int32_t> ids = batch.ids[static_cast<size_t>(t)];
        std::vector<int32_t> uniq(ids.begin(), ids.end());
        std::sort(uniq.begin(), uniq.end());
        uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
        ZT_CHECK(uniq.empty() || (uniq.front() >= 0 && uniq.back() < spec.rows), "embedding: ",
                 spec.name, " has ", spec.rows, " rows, and the batch holds id ",
                 uniq.front() < 0 ? uniq.front() : uniq.back(),
                 "; ids must be in [0, rows) (check model.tables against the data)");
        compact_ids[i].resize(ids.size());
        for (size_t p = 0; p < ids.size(); ++p)
            compact_ids[i][p] = static_cast<int32_t>(
                std::lower_bound(uniq.begin(), uniq.end(), ids[p]) - uniq.begin());
        uniques[i] = static_cast<int64_t>(uniq.size());
        for (size_t u = 0; u < uniq.size(); ++u) {
            const int64_t row = uniq[u];
            for (const TableShard& sh : place.shards) {
                if (row < sh.row_begin || row >= sh.row_end) continue;
                ex->to_owner[static_cast<size_t>(sh.rank)].push_back(
                    {static_cast<int32_t>(i), static_cast<int32_t>(u), sh.col_begin, sh.col_end});
                send[static_cast<size_t>(sh.rank)].push_back(pack_request(t, row));
            }
        }
        acc_unique_ids_ += uniques[i];
    }
    // Requests: counts, then the packed (table, row) pairs.
    std::vector<int64_t> send_counts(static_cast<size_t>(ranks_)), flat;
    for (int r = 0; r < ranks_; ++r) {
        send_counts[static_cast<size_t>(r)] = static_cast<int64_t>(send[static_cast<size_t>(r)].size());
        flat.insert(flat.end(), send[static_cast<size_t>(r)].begin(),
                    send[static_cast<size_t>(r)].end());
    }
    ex->recv_counts.assign(static_cast<size_t>(ranks_), 0);
    if (comm_) {
        std::vector<int64_t> ones(static_cast<size_t>(ranks_), 1);
        comm_->all_to_all(send_counts.data(), ones, ex->recv_counts.data(), ones, CommType::kI64)
            ->wait();
        ex->recv_requests.resize(static_cast<size_t>(total(ex->recv_counts)));
        comm_->all_to_all(flat.data(), send_counts, ex->recv_requests.data(), ex->recv_counts,
                          CommType::kI64)
            ->wait();
    } else {
        ex->recv_counts = send_counts;
        ex->recv_requests = flat;
    }
    // Owners: the rows, per source in rank order.
    std::vector<float> reply;
    ex->serve_counts.assign(static_cast<size_t>(ranks_), 0);
    {
        int64_t at = 0;
        for (int s = 0; s < ranks_; ++s) {
            const int64_t n = ex->recv_counts[static_cast<size_t>(s)];
            const size_t before = reply.size();
            serve_rows(std::span<const int64_t>(ex->recv_requests).subspan(
                           static_cast<size_t>(at), static_cast<size_t>(n)),
                       reply);
            ex->serve_counts[static_cast<size_t>(s)] = static_cast<int64_t>(reply.size() - before);
            at += n;
        }
    }
    ex->reply_counts.assign(static_cast<size_t>(ranks_), 0);
    for (int r = 0; r < ranks_; ++r)
        for (const Exchange::Req& q : ex->to_owner[static_cast<size_t>(r)])
            ex->reply_counts[static_cast<size_t>(r)] += q.c1 - q.c0;
    std::vector<float> rows(static_cast<size_t>(total(ex->reply_counts)));
    if (comm_)
        comm_->all_to_all(reply.data(), ex->serve_counts, rows.data(), ex->reply_counts,
                          CommType::kF32)
            ->wait();
    else
        rows = std::move(reply);
    // The compact tables, in the compute dtype.
    const DType dt = options_.compute_dtype;
    const size_t esize = dtype_size(dt);
    std::vector<Tensor> compact(tables.size());
    for (size_t i = 0; i < tables.size(); ++i)
        compact[i] = Tensor::empty(tape.pool(), {uniques[i], plan_.tables[static_cast<size_t>(tables[i])].dim},
                                   dt, MemCategory::kActivations);
    {
        const float* src = rows.data();
        for (int r = 0; r < ranks_; ++r)
            for (const Exchange::Req& q : ex->to_owner[static_cast<size_t>(r)]) {
                Tensor& c = compact[static_cast<size_t>(q.list)];
                const int64_t dim = c.size(1);
                char* dst = static_cast<char*>(c.raw()) +
                            static_cast<size_t>(q.u * dim + q.c0) * esize;
                convert(src, DType::kF32, dst, dt, static_cast<size_t>(q.c1 - q.c0));
                src += q.c1 - q.c0;
            }
    }
    for (int r = 0; r < ranks_; ++r)  // bytes to other ranks: counts, requests, rows
        if (r != rank_)
            acc_bytes_ += 8 + send_counts[static_cast<size_t>(r)] * 8 +
                          ex->serve_counts[static_cast<size_t>(r)] * 4;
    acc_s_ += timer.elapsed_s();
    const bool record = tape.recording();
    if (record) {
        for (size_t i = 0; i < tables.size(); ++i) {
            Var v = make_var(compact[i], true);
            v->grad = Tensor::zeros(tape.pool(), compact[i].shape(), DType::kF32,
                                    MemCategory::kActivations);
            ex->compact.push_back(v);
        }
        // Pushed before the pooling ops, so that it runs after all of their backwards.
        tape.push("sharded_embedding_exchange", [this, ex] { backward_exchange(*ex); });
    }
    std::vector<Var> out;
    out.reserve(tables.size());
    for (size_t i = 0; i < tables.size(); ++i) {
        Var table = record ? ex->compact[i] : make_var(compact[i]);
        const std::span<const float> w = batch.weights[static_cast<size_t>(tables[i])];
        out.push_back(ops::embedding_bag(tape, table, compact_ids[i],
                                         batch.offsets[static_cast<size_t>(tables[i])], w,
                                         pooling[i]));
    }
    return out;
}

void ShardedTables::backward_exchange(Exchange& ex) {
    Stopwatch timer;
    std::vector<float> grads;
    grads.reserve(static_cast<size_t>(total(ex.reply_counts)));
    for (int r = 0; r < ranks_; ++r)
        for (const Exchange::Req& q : ex.to_owner[static_cast<size_t>(r)]) {
            const Tensor& g = ex.compact[static_cast<size_t>(q.list)]->grad;
            const float* row = g.data<float>() + q.u * g.size(1);
            grads.insert(grads.end(), row + q.c0, row + q.c1);
        }
    ex.compact.clear();  // the fetched rows and their gradients are no longer needed
    std::vector<float> received(static_cast<size_t>(total(ex.serve_counts)));
    if (comm_)
        comm_->all_to_all(grads.data(), ex.reply_counts, received.data(), ex.serve_counts,
                          CommType::kF32)
            ->wait();
    else
        received = std::move(grads);
    const float* g = received.data();
    int64_t at = 0;
    for (int s = 0; s < ranks_; ++s) {
        const int64_t n = ex.recv_counts[static_cast<size_t>(s)];
        accept_grads(s, std::span<const int64_t>(ex.recv_requests)
                            .subspan(static_cast<size_t>(at), static_cast<size_t>(n)),
                     g);
        g += ex.serve_counts[static_cast<size_t>(s)];
        at += n;
    }
    for (int r = 0; r < ranks_; ++r)
        if (r != rank_) acc_bytes_ += ex.reply_counts[static_cast<size_t>(r)] * 4;
    acc_s_ += timer.elapsed_s();
}

}  // namespace zt
