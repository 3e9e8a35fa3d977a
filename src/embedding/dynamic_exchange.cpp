// Lookups of dynamic tables over the ranks (Note [Dynamic exchange]).
#include <algorithm>
#include <cstring>

#include "comm/communicator.h"
#include "embedding/dynamic_tables_detail.h"
#include "util/error.h"
#include "util/radix_sort.h"
#include "util/random.h"

// Note [Dynamic exchange]
// A dynamic table's rows are sharded row-wise by a hash of the id: rank owner(id) holds id's row,
// its optimizer state, its counters and its place in the pending map. A lookup deduplicates each
// table's ids of the rank's micro-batch and sends the distinct ids to their owners (one
// all-to-all of counts, one of (table, id) pairs); each owner sights (training) or finds
// (evaluation) them, sources in rank order, and replies with the rows, the default row or zeros
// (a third all-to-all). The requester pools them with embedding_bag as one process would.
// Backward returns each distinct row's gradient to its owner (a fourth), which adds it into the
// step's accumulator, sources in rank order. One process with accumulation N x G runs the
// micro-batches in (micro-step, rank) order (DESIGN.md, the equivalence rule), so sightings,
// admissions and each row's gradient sum happen in that run's order: the rows take its bits.
// The default row is replicated; its gradient, summed by each owner over the unadmitted ids it
// owns, is added over the ranks in rank order at finish_grads, so every replica takes the same
// update. On one rank the all-to-alls are copies.

namespace zt {

namespace {

// The raw id of a batch id: its 64 bits (a table's keys are unsigned).
uint64_t raw_id(int64_t id) { return static_cast<uint64_t>(id); }

int64_t total(const std::vector<int64_t>& v) {
    int64_t n = 0;
    for (int64_t x : v) n += x;
    return n;
}

}  // namespace

int DynamicTables::owner(uint64_t id) const {
    // Salted: U64Map hashes ids with splitmix64 too, and an owner's ids must not share low hash
    // bits there (power-of-two rank counts would crowd their home slots).
    constexpr uint64_t kOwnerSalt = 0x2545f4914f6cdd1dull;
    return ranks_ == 1
               ? 0
               : static_cast<int>(splitmix64(id ^ kOwnerSalt) % static_cast<uint64_t>(ranks_));
}

std::vector<Var> DynamicTables::lookup(Tape& tape, const ClickBatch& batch,
                                       std::span<const ops::BagPooling> pooling) {
    ZT_ASSERT(pooling.size() == tables_.size(), "one pooling per dynamic table");
    // comm.priority (on_backward_exchange set): the lookup's all-to-alls go ahead of dense
    // gradient buckets in flight (Note [Urgent ops], comm/communicator.h).
    UrgentScope urgent(comm_, static_cast<bool>(exchange_done_));
    const bool train = tape.recording();
    auto lk = std::make_shared<Lookup>();
    const size_t nt = tables_.size();
    const auto R = static_cast<size_t>(ranks_);
    // Distinct ids per table (prepared by the data thread, else here).
    std::vector<std::vector<int64_t>> own_uniq(nt);
    std::vector<std::vector<int32_t>> own_index(nt);
    std::vector<std::span<const int64_t>> uniq(nt);
    std::vector<std::span<const int32_t>> index(nt);
    std::vector<uint64_t> keys, tmp;
    for (size_t i = 0; i < nt; ++i) {
        const auto f = static_cast<size_t>(features_[i]);
        if (batch.distinct.size() == batch.ids.size() &&
            batch.distinct_index.size() == batch.ids.size()) {
            uniq[i] = batch.distinct[f];
            index[i] = batch.distinct_index[f];
        } else {
            index_distinct(batch.ids[f], own_uniq[i], own_index[i], keys, tmp);
            uniq[i] = own_uniq[i];
            index[i] = own_index[i];
        }
    }
    // Requests per owner: (table, id) pairs, tables in order, ascending ids within one.
    std::vector<std::vector<int64_t>> send(R);
    std::vector<std::vector<std::pair<int32_t, int64_t>>> to_owner(R);
    for (size_t i = 0; i < nt; ++i)
        for (size_t u = 0; u < uniq[i].size(); ++u) {
            const uint64_t id = raw_id(uniq[i][u]);
            const auto o = static_cast<size_t>(owner(id));
            send[o].push_back(static_cast<int64_t>(i));
            send[o].push_back(static_cast<int64_t>(id));
            to_owner[o].emplace_back(static_cast<int32_t>(i), static_cast<int64_t>(u));
        }
    std::vector<int64_t> flat, send_pairs(R);
    lk->send_counts.assign(R, 0);
    lk->reply_counts.assign(R, 0);
    for (size_t o = 0; o < R; ++o) {
        flat.insert(flat.end(), send[o].begin(), send[o].end());
        send_pairs[o] = static_cast<int64_t>(send[o].size());
        lk->send_counts[o] = send_pairs[o] / 2;
        for (const auto& [i, u] : to_owner[o]) {
            lk->req_table.push_back(i);
            lk->req_u.push_back(u);
            lk->reply_counts[o] += tables_[static_cast<size_t>(i)]->dim();
        }
    }
    std::vector<int64_t> recv;
    lk->recv_counts.assign(R, 0);
    if (comm_) {
        std::vector<int64_t> ones(R, 1), recv_pairs(R);
        comm_
            ->all_to_all(lk->send_counts.data(), ones, lk->recv_counts.data(), ones, CommType::kI64)
            ->wait();
        for (size_t s = 0; s < R; ++s) recv_pairs[s] = 2 * lk->recv_counts[s];
        recv.resize(static_cast<size_t>(total(recv_pairs)));
        comm_->all_to_all(flat.data(), send_pairs, recv.data(), recv_pairs, CommType::kI64)->wait();
    } else {
        lk->recv_counts = lk->send_counts;
        recv = std::move(flat);
    }
    // Owner: sight or find each request, sources in rank order.
    const size_t nrecv = recv.size() / 2;
    lk->recv_table.resize(nrecv);
    lk->recv_slot.resize(nrecv);
    const bool stale = train && options_.staleness > 0;  // Note [Stale dynamic updates]
    if (stale) lk->recv_id.resize(nrecv);
    lk->serve_counts.assign(R, 0);
    std::vector<std::vector<int64_t>> want(nt);  // per table: the slots asked for, in order
    size_t q = 0;
    for (size_t s = 0; s < R; ++s)
        for (int64_t k = 0; k < lk->recv_counts[s]; ++k, ++q) {
            const auto i = static_cast<size_t>(recv[2 * q]);
            ZT_ASSERT(i < nt, "a request for an unknown dynamic table");
            DynamicTable& t = *tables_[i];
            const auto id = static_cast<uint64_t>(recv[2 * q + 1]);
            const int64_t slot = train ? t.see(id) : t.find(id);
            lk->recv_table[q] = static_cast<int32_t>(i);
            lk->recv_slot[q] = slot;
            if (stale) lk->recv_id[q] = id;
            lk->serve_counts[s] += t.dim();
            if (slot >= 0) want[i].push_back(slot);
            if (train && slot < 0) ++ids_unadmitted_;
        }
    // The rows: fetched (training: on a tier they stay in its cache until the step's update) or
    // copied (evaluation, which leaves a tier's cache as it is). Then the reply.
    std::vector<std::vector<int64_t>> handles(nt);
    std::vector<std::vector<float>> copies(nt);
    for (size_t i = 0; i < nt; ++i) {
        if (want[i].empty()) continue;
        DynamicTable& t = *tables_[i];
        if (train) {
            handles[i].resize(want[i].size());
            t.fetch(want[i], handles[i].data());
        } else {
            copies[i].resize(want[i].size() * static_cast<size_t>(t.dim()));
            t.read_rows(want[i], copies[i].data());
        }
    }
    std::vector<float> reply;
    std::vector<size_t> next(nt, 0);
    for (q = 0; q < nrecv; ++q) {
        const auto i = static_cast<size_t>(lk->recv_table[q]);
        const DynamicTable& t = *tables_[i];
        const float* src = t.default_row();
        if (lk->recv_slot[q] >= 0) {
            const size_t k = next[i]++;
            src = train ? t.fetched_row(handles[i][k])
                        : copies[i].data() + k * static_cast<size_t>(t.dim());
        }
        if (src)
            reply.insert(reply.end(), src, src + t.dim());
        else
            reply.insert(reply.end(), static_cast<size_t>(t.dim()), 0.0f);
    }
    std::vector<float> rows;
    if (comm_) {
        rows.resize(static_cast<size_t>(total(lk->reply_counts)));
        comm_
            ->all_to_all(reply.data(), lk->serve_counts, rows.data(), lk->reply_counts,
                         CommType::kF32)
            ->wait();
    } else {
        rows = std::move(reply);
    }
    // The compact tables (U, dim) in the compute dtype, filled from the replies.
    const DType dt = options_.compute_dtype;
    const size_t esize = dtype_size(dt);
    std::vector<Tensor> compact(nt);
    for (size_t i = 0; i < nt; ++i) {
        compact[i] =
            Tensor::empty(tape.pool(), {static_cast<int64_t>(uniq[i].size()), tables_[i]->dim()},
                          dt, MemCategory::kActivations);
        if (train) ids_seen_ += static_cast<int64_t>(uniq[i].size());
    }
    int64_t at = 0;
    for (size_t r = 0; r < lk->req_table.size(); ++r) {
        const auto i = static_cast<size_t>(lk->req_table[r]);
        const int64_t dim = tables_[i]->dim();
        char* dst =
            static_cast<char*>(compact[i].raw()) + static_cast<size_t>(lk->req_u[r] * dim) * esize;
        convert(rows.data() + at, DType::kF32, dst, dt, static_cast<size_t>(dim));
        at += dim;
    }
    std::vector<Var> vars(nt);
    for (size_t i = 0; i < nt; ++i) {
        vars[i] = make_var(compact[i], train);
        if (!train) continue;
        vars[i]->grad =
            Tensor::zeros(tape.pool(), compact[i].shape(), DType::kF32, MemCategory::kActivations);
        lk->compact.push_back(vars[i]);
    }
    // Pushed before the pooling ops, so that it runs after all of their backwards.
    if (train) tape.push("dynamic_embedding_exchange", [this, lk] { backward(*lk); });
    std::vector<Var> out;
    for (size_t i = 0; i < nt; ++i) {
        const auto f = static_cast<size_t>(features_[i]);
        out.push_back(ops::embedding_bag(tape, vars[i], index[i], batch.offsets[f],
                                         batch.weights[f], pooling[i]));
    }
    return out;
}

// Requester: each request's row gradient to its owner; owner: into the step's accumulators
// (accept_grads). With staleness the exchange is held instead (Note [Stale dynamic updates]).
void DynamicTables::backward(Lookup& lk) {
    const bool stale = options_.staleness > 0;
    auto held = stale ? std::make_unique<HeldGrads>() : nullptr;
    std::vector<float> own;
    std::vector<float>& grads = stale ? held->send : own;
    grads.reserve(static_cast<size_t>(total(lk.reply_counts)));
    for (size_t r = 0; r < lk.req_table.size(); ++r) {
        const auto i = static_cast<size_t>(lk.req_table[r]);
        const int64_t dim = tables_[i]->dim();
        const float* g = lk.compact[i]->grad.data<float>() + lk.req_u[r] * dim;
        grads.insert(grads.end(), g, g + dim);
    }
    lk.compact.clear();
    if (stale) {
        hold(lk, std::move(held));
        if (exchange_done_) exchange_done_();  // issued: what comes next queues behind the rows
        return;
    }
    std::vector<float> received;
    if (comm_) {
        received.resize(static_cast<size_t>(total(lk.serve_counts)));
        UrgentScope urgent(comm_, static_cast<bool>(exchange_done_));  // as the lookup's
        comm_
            ->all_to_all(grads.data(), lk.reply_counts, received.data(), lk.serve_counts,
                         CommType::kF32)
            ->wait();
    } else {
        received = std::move(grads);
    }
    accept_grads(lk.recv_table, lk.recv_slot, lk.recv_counts, received.data());
    if (exchange_done_) exchange_done_();
}

// Sources in rank order; within one, its requests in order into the rows' accumulators (from
// zero, first touch order), and its unadmitted ids' gradients into a part from zero added into
// the default row's.
void DynamicTables::accept_grads(std::span<const int32_t> table, std::span<const int64_t> slots,
                                 std::span<const int64_t> counts, const float* g) {
    size_t q = 0;
    std::vector<std::vector<float>> part(tables_.size());
    for (size_t s = 0; s < static_cast<size_t>(ranks_); ++s) {
        for (int64_t k = 0; k < counts[s]; ++k, ++q) {
            const auto i = static_cast<size_t>(table[q]);
            DynamicTable& t = *tables_[i];
            Acc& a = *acc_[i];
            const int64_t dim = t.dim();
            const int64_t slot = slots[q];
            const float* gq = g;
            g += dim;
            if (slot == kDroppedSlot) continue;
            if (slot < 0) {
                if (!t.default_row()) continue;  // zeros: nothing to train
                if (part[i].empty()) part[i].assign(static_cast<size_t>(dim), 0.0f);
                for (int64_t c = 0; c < dim; ++c) part[i][static_cast<size_t>(c)] += gq[c];
                continue;
            }
            if (a.pos.size() < static_cast<size_t>(t.rows()))
                a.pos.resize(static_cast<size_t>(t.rows()), -1);
            int64_t& p = a.pos[static_cast<size_t>(slot)];
            if (p < 0) {
                p = static_cast<int64_t>(a.slots.size());
                a.slots.push_back(slot);
                a.grads.resize(a.grads.size() + static_cast<size_t>(dim), 0.0f);
            }
            float* dst = a.grads.data() + p * dim;
            for (int64_t c = 0; c < dim; ++c) dst[c] += gq[c];
        }
        for (size_t i = 0; i < tables_.size(); ++i) {  // this source's unadmitted reads
            if (part[i].empty()) continue;
            Acc& a = *acc_[i];
            if (a.default_grad.empty()) a.default_grad.assign(part[i].size(), 0.0f);
            for (size_t c = 0; c < part[i].size(); ++c) a.default_grad[c] += part[i][c];
            part[i].clear();
        }
    }
}

}  // namespace zt

namespace zt {

// Collective (every rank, right after the same lookup): each rank sends the owners its next
// micro-batch's distinct ids (one all-to-all of counts and one of (table, id) pairs, as a lookup's
// first two), and every owner's tiers start reading the pages of those that are rows and not in
// the cache (Note [Row prefetch] in row_tier.cpp). Finds only: nothing is sighted or admitted. A
// rank without a next batch sends nothing and still answers.
void DynamicTables::prefetch(const ClickBatch& next) {
    if (!tiered_) return;
    const size_t nt = tables_.size();
    const auto R = static_cast<size_t>(ranks_);
    std::vector<std::vector<int64_t>> send(R);
    std::vector<int64_t> own;
    std::vector<int32_t> own_index;
    std::vector<uint64_t> keys, tmp;
    const bool indexed = next.distinct.size() == next.ids.size();
    for (size_t i = 0; i < nt && !next.ids.empty(); ++i) {
        const auto f = static_cast<size_t>(features_[i]);
        if (!indexed) index_distinct(next.ids[f], own, own_index, keys, tmp);
        const std::span<const int64_t> ids =
            indexed ? std::span<const int64_t>(next.distinct[f]) : std::span<const int64_t>(own);
        for (int64_t v : ids) {
            const uint64_t id = raw_id(v);
            auto& to = send[static_cast<size_t>(owner(id))];
            to.push_back(static_cast<int64_t>(i));
            to.push_back(static_cast<int64_t>(id));
        }
    }
    std::vector<int64_t> flat, send_pairs(R), recv_pairs(R), recv;
    for (size_t o = 0; o < R; ++o) {
        flat.insert(flat.end(), send[o].begin(), send[o].end());
        send_pairs[o] = static_cast<int64_t>(send[o].size());
    }
    if (comm_) {
        const std::vector<int64_t> ones(R, 1);
        comm_->all_to_all(send_pairs.data(), ones, recv_pairs.data(), ones, CommType::kI64)->wait();
        recv.resize(static_cast<size_t>(total(recv_pairs)));
        comm_->all_to_all(flat.data(), send_pairs, recv.data(), recv_pairs, CommType::kI64)->wait();
    } else {
        recv = std::move(flat);
    }
    std::vector<std::vector<int64_t>> slots(nt);
    for (size_t q = 0; q + 1 < recv.size(); q += 2) {
        const auto i = static_cast<size_t>(recv[q]);
        ZT_ASSERT(i < nt, "a read-ahead request for an unknown dynamic table");
        const int64_t slot = tables_[i]->find(static_cast<uint64_t>(recv[q + 1]));
        if (slot >= 0) slots[i].push_back(slot);
    }
    for (size_t i = 0; i < nt; ++i) tables_[i]->prefetch(slots[i]);  // none: drops the last ones
}

}  // namespace zt
