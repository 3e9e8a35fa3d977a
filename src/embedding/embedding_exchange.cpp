// Lookups of sharded tables: the forward and backward all-to-alls (Note [Unique-row exchange]).
#include <algorithm>
#include <cstring>

#include "comm/communicator.h"
#include "embedding/sharded_tables_detail.h"
#include "tensor/threads.h"
#include "util/error.h"
#include "util/radix_sort.h"
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
// Speed: the per-table deduplication (index_distinct: one radix sort of (id, position) keys
// gives the distinct ids and every position's index into them) is done by the data thread for
// the next batch while this one trains (ClickBatch::distinct), else here, tables in parallel; the
// owner's
// row copies, the requester's compact-table assembly and the gradient gathers run requests in
// parallel, each writing its own slot; none of it changes a bit of the result.

namespace zt {

struct ShardedTables::Exchange {
    struct Req {
        int32_t list;  // index into the lookup's tables
        int32_t u;     // row of the compact table
        int64_t c0, c1;
        int64_t at;  // offset of its floats in the reply from its owner (all owners, rank order)
    };
    std::vector<Var> compact;            // per listed table: (U, dim) fetched rows
    std::vector<Req> reqs;               // requester: every request, by owner in rank order
    std::vector<int64_t> reply_counts;   // requester: floats each owner sent
    std::vector<int64_t> recv_requests;  // owner: every rank's requests, in rank order
    std::vector<int64_t> recv_counts;    // owner: requests per source
    std::vector<int64_t> serve_counts;   // owner: floats sent per source
};

// Note [Gradient rows in flight]
// The backward's plain (f32) all-to-all of gradient rows is issued and left in flight: nothing in
// the rest of the backward needs the rows, only the owners' accumulators at the step. It is
// completed (waited for, and the rows accepted in source order as before) at the next lookup,
// which reuses its buffers, or at finish_grads, whichever comes first; so it overlaps the rest of
// the backward (a DLRM's bottom MLP), and the bits are those of waiting at once. With
// embedding.comm_precision a codec's exchange runs to its end as before.
namespace {

constexpr int64_t kParallelMinFloats = 1 << 14;  // row copies below this: one thread

// Elements of v summed: an all-to-all's total count.
int64_t total(const std::vector<int64_t>& v) {
    int64_t n = 0;
    for (int64_t x : v) n += x;
    return n;
}

}  // namespace

void ShardedTables::fetch_tiered(std::span<const int64_t> requests, std::vector<int64_t>& slots) {
    slots.assign(requests.size(), -1);
    if (!options_.tier.on()) return;
    std::vector<std::vector<int64_t>> rows(shards_.size()), at(shards_.size());
    for (size_t q = 0; q < requests.size(); ++q) {
        const auto i =
            static_cast<size_t>(shard_of_table_[static_cast<size_t>(request_table(requests[q]))]);
        rows[i].push_back(request_row(requests[q]) - shards_[i]->range.row_begin);
        at[i].push_back(static_cast<int64_t>(q));
    }
    std::vector<int64_t> got;
    for (size_t i = 0; i < shards_.size(); ++i) {
        if (rows[i].empty()) continue;
        got.resize(rows[i].size());
        shards_[i]->tier->fetch(rows[i], got.data());
        for (size_t k = 0; k < got.size(); ++k) slots[static_cast<size_t>(at[i][k])] = got[k];
    }
}

void ShardedTables::exchange_requests(const std::vector<int64_t>& send_counts,
                                      std::vector<int64_t>& flat, std::vector<int64_t>& recv_counts,
                                      std::vector<int64_t>& recv_requests) {
    if (!comm_) {
        recv_counts = send_counts;
        recv_requests = std::move(flat);
        return;
    }
    recv_counts.assign(static_cast<size_t>(ranks_), 0);
    const std::vector<int64_t> ones(static_cast<size_t>(ranks_), 1);
    comm_->all_to_all(send_counts.data(), ones, recv_counts.data(), ones, CommType::kI64)->wait();
    recv_requests.resize(static_cast<size_t>(total(recv_counts)));
    comm_->all_to_all(flat.data(), send_counts, recv_requests.data(), recv_counts, CommType::kI64)
        ->wait();
}

void ShardedTables::serve_rows(std::span<const int64_t> requests, std::span<const int64_t> counts,
                               std::vector<int64_t>& serve_counts, std::vector<float>& reply) {
    // Offsets first (and every check, outside the parallel copy).
    std::vector<int64_t> at(requests.size() + 1, 0);
    serve_counts.assign(counts.size(), 0);
    size_t q = 0;
    for (size_t src = 0; src < counts.size(); ++src)
        for (int64_t k = 0; k < counts[src]; ++k, ++q) {
            const int t = request_table(requests[q]);
            ZT_ASSERT(t >= 0 && t < static_cast<int>(shard_of_table_.size()) &&
                          shard_of_table_[static_cast<size_t>(t)] >= 0,
                      "a request for table ", t, " on a rank without its shard");
            const Shard& s = *shards_[static_cast<size_t>(shard_of_table_[static_cast<size_t>(t)])];
            const int64_t r = request_row(requests[q]) - s.range.row_begin;
            ZT_ASSERT(r >= 0 && r < s.storage.rows, "a request for a row outside the shard");
            at[q + 1] = at[q] + s.storage.cols;
            serve_counts[src] += s.storage.cols;
        }
    reply.resize(static_cast<size_t>(at.back()));
    fetch_tiered(requests, slots_);  // embedding.tier: the rows into the cache first
    const std::vector<int64_t>& slot = slots_;
    const auto n = static_cast<int64_t>(requests.size());
#pragma omp parallel for schedule(static) if (at.back() >= parallel_min_elems(kParallelMinFloats))
    for (int64_t i = 0; i < n; ++i) {
        const Shard& s = *shards_[static_cast<size_t>(
            shard_of_table_[static_cast<size_t>(request_table(requests[static_cast<size_t>(i)]))])];
        const int64_t r = request_row(requests[static_cast<size_t>(i)]) - s.range.row_begin;
        const int64_t cols = s.storage.cols;
        float* dst = reply.data() + at[static_cast<size_t>(i)];
        if (s.tier) {
            std::memcpy(dst, s.tier->slot_weights(slot[static_cast<size_t>(i)]),
                        static_cast<size_t>(cols) * sizeof(float));
        } else if (!s.storage.split()) {
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
    complete_grads();  // its buffers are about to be reused
    ZT_ASSERT(tables.size() == pooling.size(), "one pooling per table");
    Stopwatch timer;
    // comm.priority (on_backward_exchange set): the lookup's all-to-alls go ahead of dense
    // gradient buckets in flight (Note [Urgent ops], comm/communicator.h).
    UrgentScope urgent(comm_, static_cast<bool>(exchange_done_));
    auto ex = std::make_shared<Exchange>();
    // Distinct ids per table and each position's index into them: prepared by the data thread
    // while the previous batch trained (ClickBatch::distinct), else here, tables in parallel.
    const size_t nt = tables.size();
    std::vector<std::span<const int64_t>> uniq(nt);
    std::vector<std::span<const int32_t>> index(nt);
    std::vector<std::vector<int64_t>> own_uniq;
    std::vector<std::vector<int32_t>> own_index;
    if (batch.distinct.size() == batch.ids.size() &&
        batch.distinct_index.size() == batch.ids.size()) {
        for (size_t i = 0; i < nt; ++i) {
            uniq[i] = batch.distinct[static_cast<size_t>(tables[i])];
            index[i] = batch.distinct_index[static_cast<size_t>(tables[i])];
        }
    } else {
        own_uniq.resize(nt);
        own_index.resize(nt);
        int64_t ids = 0;
        for (size_t i = 0; i < nt; ++i)
            ids += static_cast<int64_t>(batch.ids[static_cast<size_t>(tables[i])].size());
#pragma omp parallel if (nt > 1 && ids >= parallel_min_elems(kParallelMinFloats))
        {
            std::vector<uint64_t> keys, tmp;
#pragma omp for schedule(dynamic, 1)
            for (int64_t i = 0; i < static_cast<int64_t>(nt); ++i) {
                const auto u = static_cast<size_t>(i);
                index_distinct(batch.ids[static_cast<size_t>(tables[u])], own_uniq[u], own_index[u],
                               keys, tmp);
            }
        }
        for (size_t i = 0; i < nt; ++i) {
            uniq[i] = own_uniq[i];
            index[i] = own_index[i];
        }
    }
    for (size_t i = 0; i < nt; ++i) {
        const EmbeddingTableSpec& spec = plan_.tables[static_cast<size_t>(tables[i])];
        ZT_CHECK(index[i].size() == batch.ids[static_cast<size_t>(tables[i])].size(),
                 "embedding: ", spec.name,
                 ": the batch's distinct-id index does not match its ids");
        // Ascending as unsigned: a negative id sorts last (index_distinct).
        ZT_CHECK(uniq[i].empty() ||
                     static_cast<uint64_t>(uniq[i].back()) < static_cast<uint64_t>(spec.rows),
                 "embedding: ", spec.name, " has ", spec.rows, " rows, and the batch holds id ",
                 uniq[i].back(),
                 "; ids must be in [0, rows) (check model.tables against the data)");
    }
    // Requests per owner, in table order and ascending rows within a table.
    std::vector<std::vector<Exchange::Req>> to_owner(static_cast<size_t>(ranks_));
    std::vector<std::vector<int64_t>> send(static_cast<size_t>(ranks_));
    for (size_t i = 0; i < tables.size(); ++i) {
        const int t = tables[i];
        const TablePlacement& place = plan_.placement[static_cast<size_t>(t)];
        for (size_t u = 0; u < uniq[i].size(); ++u) {
            const int64_t row = uniq[i][u];
            for (const TableShard& sh : place.shards) {
                if (row < sh.row_begin || row >= sh.row_end) continue;
                to_owner[static_cast<size_t>(sh.rank)].push_back({static_cast<int32_t>(i),
                                                                  static_cast<int32_t>(u),
                                                                  sh.col_begin, sh.col_end, 0});
                send[static_cast<size_t>(sh.rank)].push_back(pack_request(t, row));
            }
        }
        acc_unique_ids_ += static_cast<int64_t>(uniq[i].size());
    }
    std::vector<int64_t> send_counts(static_cast<size_t>(ranks_)), flat;
    ex->reply_counts.assign(static_cast<size_t>(ranks_), 0);
    {
        int64_t at = 0;
        for (int r = 0; r < ranks_; ++r) {
            const auto ru = static_cast<size_t>(r);
            send_counts[ru] = static_cast<int64_t>(send[ru].size());
            flat.insert(flat.end(), send[ru].begin(), send[ru].end());
            const int64_t before = at;
            for (Exchange::Req q : to_owner[ru]) {
                q.at = at;
                at += q.c1 - q.c0;
                ex->reqs.push_back(q);
            }
            ex->reply_counts[ru] = at - before;
        }
    }
    exchange_requests(send_counts, flat, ex->recv_counts, ex->recv_requests);
    // Owners: the rows, per source in rank order.
    // send_buf_ and recv_buf_ live as long as the tables: fresh vectors took fresh pages from
    // the system every step.
    serve_rows(ex->recv_requests, ex->recv_counts, ex->serve_counts, send_buf_);
    // embedding.comm_precision: the rows travel as the forward codec's bytes (every segment,
    // this rank's own and a group of one's included, makes the round trip).
    std::vector<float>& rows = comm_ || fwd_a2a_ ? recv_buf_ : send_buf_;
    rows.resize(static_cast<size_t>(total(ex->reply_counts)));
    if (fwd_a2a_)
        fwd_a2a_->run(comm_, send_buf_.data(), ex->serve_counts, rows.data(), ex->reply_counts,
                      acc_comm_stats_);
    else if (comm_)
        comm_
            ->all_to_all(send_buf_.data(), ex->serve_counts, rows.data(), ex->reply_counts,
                         CommType::kF32)
            ->wait();
    // The compact tables, in the compute dtype; each request fills its own slot.
    const DType dt = options_.compute_dtype;
    const size_t esize = dtype_size(dt);
    std::vector<Tensor> compact(tables.size());
    std::vector<char*> base(tables.size());
    std::vector<int64_t> dims(tables.size());
    for (size_t i = 0; i < tables.size(); ++i) {
        dims[i] = plan_.tables[static_cast<size_t>(tables[i])].dim;
        compact[i] = Tensor::empty(tape.pool(), {static_cast<int64_t>(uniq[i].size()), dims[i]}, dt,
                                   MemCategory::kActivations);
        base[i] = static_cast<char*>(compact[i].raw());
    }
    const auto nreq = static_cast<int64_t>(ex->reqs.size());
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(rows.size()) >= \
                                              parallel_min_elems(kParallelMinFloats))
    for (int64_t k = 0; k < nreq; ++k) {
        const Exchange::Req& q = ex->reqs[static_cast<size_t>(k)];
        const auto li = static_cast<size_t>(q.list);
        char* dst = base[li] + static_cast<size_t>(q.u * dims[li] + q.c0) * esize;
        convert(rows.data() + q.at, DType::kF32, dst, dt, static_cast<size_t>(q.c1 - q.c0));
    }
    for (int r = 0; r < ranks_; ++r)  // bytes to other ranks: counts, requests, rows
        if (r != rank_)
            acc_bytes_ +=
                8 + send_counts[static_cast<size_t>(r)] * 8 +
                (fwd_codec_ ? fwd_codec_->encoded_bytes(ex->serve_counts[static_cast<size_t>(r)])
                            : ex->serve_counts[static_cast<size_t>(r)] * 4);
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
        out.push_back(ops::embedding_bag(
            tape, table, index[i], batch.offsets[static_cast<size_t>(tables[i])], w, pooling[i]));
    }
    return out;
}

void ShardedTables::backward_exchange(Exchange& ex) {
    Stopwatch timer;
    auto p = std::make_unique<PendingGrads>();
    // embedding.staleness s > 0 (Note [Stale embedding updates]): the exchange keeps buffers of
    // its own, in flight until the finish_grads s steps later.
    const bool stale = options_.staleness > 0;
    std::vector<float>& grads = stale ? p->send : send_buf_;
    grads.resize(static_cast<size_t>(total(ex.reply_counts)));
    const auto nreq = static_cast<int64_t>(ex.reqs.size());
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(grads.size()) >= \
                                              parallel_min_elems(kParallelMinFloats))
    for (int64_t k = 0; k < nreq; ++k) {
        const Exchange::Req& q = ex.reqs[static_cast<size_t>(k)];
        const Tensor& g = ex.compact[static_cast<size_t>(q.list)]->grad;
        const float* row = g.data<float>() + q.u * g.size(1);
        std::memcpy(grads.data() + q.at, row + q.c0,
                    static_cast<size_t>(q.c1 - q.c0) * sizeof(float));
    }
    ex.compact.clear();  // the fetched rows and their gradients are no longer needed
    std::vector<float>& received = stale ? (comm_ || bwd_a2a_ ? p->recv : p->send)
                                         : (comm_ || bwd_a2a_ ? recv_buf_ : send_buf_);
    received.resize(static_cast<size_t>(total(ex.serve_counts)));
    if (bwd_a2a_)  // embedding.comm_precision's backward codec
        bwd_a2a_->run(comm_, grads.data(), ex.reply_counts, received.data(), ex.serve_counts,
                      acc_comm_stats_);
    else if (comm_) {  // in flight (Note [Gradient rows in flight]); stale: on their own channel
        // comm.priority: the rows the step's sparse update needs go ahead of dense buckets.
        UrgentScope urgent(comm_, exchange_done_ && !stale_comm_);
        p->handle = (stale_comm_ ? stale_comm_.get() : comm_)
                        ->all_to_all(grads.data(), ex.reply_counts, received.data(),
                                     ex.serve_counts, CommType::kF32);
    }
    p->recv_requests = std::move(ex.recv_requests);
    p->recv_counts = std::move(ex.recv_counts);
    p->serve_counts = std::move(ex.serve_counts);
    if (stale) {
        stale_.push_back(std::move(p));
    } else {
        pending_ = std::move(p);
        if (!pending_->handle) complete_grads();
    }
    for (int r = 0; r < ranks_; ++r)
        if (r != rank_)
            acc_bytes_ += bwd_codec_
                              ? bwd_codec_->encoded_bytes(ex.reply_counts[static_cast<size_t>(r)])
                              : ex.reply_counts[static_cast<size_t>(r)] * 4;
    acc_s_ += timer.elapsed_s();
    if (exchange_done_) exchange_done_();  // issued: what comes next queues behind the rows
}

void ShardedTables::complete_grads() {
    if (!pending_) return;
    const std::unique_ptr<PendingGrads> p = std::move(pending_);
    accept_pending(*p, comm_ || bwd_a2a_ ? recv_buf_ : send_buf_);
}

void ShardedTables::complete_stale(StepGrads& list) {
    for (const auto& p : list) accept_pending(*p, comm_ || bwd_a2a_ ? p->recv : p->send);
    list.clear();
}

void ShardedTables::accept_pending(PendingGrads& p, const std::vector<float>& received) {
    Stopwatch timer;
    if (p.handle) p.handle->wait();
    const float* g = received.data();
    int64_t at = 0;
    for (int s = 0; s < ranks_; ++s) {
        const int64_t n = p.recv_counts[static_cast<size_t>(s)];
        accept_grads(s,
                     std::span<const int64_t>(p.recv_requests)
                         .subspan(static_cast<size_t>(at), static_cast<size_t>(n)),
                     g);
        g += p.serve_counts[static_cast<size_t>(s)];
        at += n;
    }
    acc_s_ += timer.elapsed_s();
}

}  // namespace zt
