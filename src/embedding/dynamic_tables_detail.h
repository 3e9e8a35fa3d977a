// The implementation types of DynamicTables, shared by dynamic_tables.cpp (gradients, step,
// checkpoints, export) and dynamic_exchange.cpp (lookups). Not for other users.
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "embedding/dynamic_tables.h"

namespace zt {

// One table's gradients of a step on the rank that owns its rows: per row slot, its position in
// `slots` (first touch order) or -1; after finish_grads, merged_slots / merged ascending by id.
// A row's parts are added in arrival order into zero: micro-steps in order, and within one the
// requesting ranks in rank order, which is the micro-batch order of the one-process run with
// accumulation N x G (Note [Dynamic exchange]).
struct DynamicTables::Acc {
    std::vector<int64_t> pos;  // per slot
    std::vector<int64_t> slots;
    std::vector<float> grads;         // slots.size() x dim
    std::vector<float> default_grad;  // dim, when the default row was read (this rank's ids)
    std::vector<int64_t> merged_slots;
    std::vector<float> merged;
    bool merged_default = false;  // default_grad then holds the group's sum
};

// One lookup's routing, kept for its backward.
struct DynamicTables::Lookup {
    std::vector<Var> compact;  // per table (training only): (U, dim) rows read
    // Requester: every request in owner-major order (table, then ascending id): its table and
    // row of the compact table; requests and floats sent to each owner.
    std::vector<int32_t> req_table;
    std::vector<int64_t> req_u;
    std::vector<int64_t> send_counts, reply_counts;
    // Owner: the requests received, source-major: table, slot (-1: unadmitted); per source the
    // requests and floats.
    std::vector<int32_t> recv_table;
    std::vector<int64_t> recv_slot;
    std::vector<int64_t> recv_counts, serve_counts;
    // embedding.staleness > 0: each request's id, which names its row when the update lands (the
    // slot may have changed by then, Note [Stale dynamic updates]).
    std::vector<uint64_t> recv_id;
};

// embedding.staleness > 0 (Note [Stale dynamic updates]): one backward exchange of gradient rows,
// in flight on the tables' own channel until its step lands, with what the owner needs then: the
// Lookup's owner side (its slots only as admitted or not) and the exchange's buffers.
struct DynamicTables::HeldGrads {
    CommHandle handle;  // null: nothing in flight (one rank)
    std::vector<float> send, recv;
    std::vector<int32_t> recv_table;
    std::vector<int64_t> recv_slot;  // at the lookup: >= 0 a row, -1 unadmitted
    std::vector<uint64_t> recv_id;
    std::vector<int64_t> recv_counts, serve_counts;
};

// One step's held exchanges (one per micro-batch), and per table the ids its end_step evicted
// (a held update of an earlier step drops them).
struct DynamicTables::HeldStep {
    std::vector<std::unique_ptr<HeldGrads>> exchanges;
    std::vector<std::vector<uint64_t>> left;
};

}  // namespace zt
