// Stale updates of dynamic tables (embedding.staleness s > 0): the held gradient exchanges and
// their landing, keyed by id (Note [Stale dynamic updates]). The synchronous path (s = 0) does not
// come here.
#include <algorithm>

#include "comm/communicator.h"
#include "embedding/dynamic_tables_detail.h"
#include "util/error.h"

// Note [Stale dynamic updates]
// Persia's bounded staleness for dynamic tables, as Note [Stale embedding updates] for the static
// ones: step k's table update lands at the end of step k + s with step k + s's rate, update count,
// gradient norm and clipping, so lookups read rows lacking at most the last s steps' updates, and
// each micro-batch's backward exchange (the gradient rows to their owners, Note [Dynamic
// exchange]) stays in flight on a channel of its own (stale_comm_) until its step lands; the
// lookups' all-to-alls, sightings and admissions stay synchronous. What differs from static tables
// is that slots do not name rows for long: between step k and k + s a row may leave (unseen_steps,
// max_rows) and its slot go to another id or to the last row moved into it. So the owner keeps,
// per held request, the id (and whether it had a row at the lookup) rather than the slot, and the
// landing looks each id up again:
// - a request that read the default row (unadmitted at its lookup) adds to the default row's
//   gradient, whatever happened to the id since: that is the row it read;
// - a request whose row left at the end of any step from k on (each held step keeps the ids its
//   end_step evicted) is dropped, even when the id has a row again (a new row, initialized anew,
//   which step k never read): counted in metrics as stale_dropped (distinct rows, over the ranks);
// - otherwise the row is where the table says now, and takes its part.
// The landing adds the parts into zero in the synchronous order (micro-batches, then sources in
// rank order) and sorts by id, so a row the window leaves alone takes the synchronous run's sum
// bits, s steps late. Evictions stay after the update at the end of each step: a row last seen at
// step k and evicted at the end of step k + s takes step k's update, then leaves; one evicted
// before (a smaller unseen_steps than s, or the cap) loses it. The default row's gradient is
// summed over the ranks at the landing. A checkpoint (and the end of training) lands every held
// step first, oldest first, each as its own update with the last step's rate and update count and
// no table step (no evictions, no step count: apply_held), so a checkpoint holds every update and
// a resumed run, which starts with nothing held, continues like the uninterrupted run (which
// applies at the same checkpoint steps) bit for bit. Incremental checkpoints need nothing more: a
// row is marked changed when it is sighted, and its late update lands before the next checkpoint.
// A step skipped for a non-finite loss drops the update it would have applied (the oldest held
// step's). With embedding.tier a landing update fetches its rows again (update_late, as Note
// [Stale updates on a tier]). Memory: s steps' gradient rows, sent and received, and 20 bytes a
// held request (id, table, slot), outside the budget.

namespace zt {

namespace {

int64_t total(const std::vector<int64_t>& v) {
    int64_t n = 0;
    for (int64_t x : v) n += x;
    return n;
}

}  // namespace

DynamicTables::~DynamicTables() {
    try {  // the held exchanges' buffers are about to go
        for (auto& h : stale_)
            if (h->handle) h->handle->wait();
        for (auto& step : held_)
            for (auto& h : step->exchanges)
                if (h->handle) h->handle->wait();
    } catch (...) {  // a failed group: nothing more to wait for
    }
}

void DynamicTables::hold(Lookup& lk, std::unique_ptr<HeldGrads> h) {
    if (comm_) {
        h->recv.resize(static_cast<size_t>(total(lk.serve_counts)));
        h->handle = stale_comm_->all_to_all(h->send.data(), lk.reply_counts, h->recv.data(),
                                            lk.serve_counts, CommType::kF32);
    }
    h->recv_table = std::move(lk.recv_table);
    h->recv_slot = std::move(lk.recv_slot);
    h->recv_id = std::move(lk.recv_id);
    h->recv_counts = std::move(lk.recv_counts);
    h->serve_counts = std::move(lk.serve_counts);
    stale_.push_back(std::move(h));
}

// The oldest held step's gradient rows into the accumulators (collective-free; waits for its
// exchanges).
void DynamicTables::land_oldest() {
    const std::unique_ptr<HeldStep> step = std::move(held_.front());
    held_.pop_front();
    // Per table: the ids that left at the end of this step or of any later one.
    const size_t nt = tables_.size();
    std::vector<std::vector<uint64_t>> gone(nt);
    auto add = [&](const HeldStep& h) {
        for (size_t i = 0; i < nt; ++i)
            gone[i].insert(gone[i].end(), h.left[i].begin(), h.left[i].end());
    };
    add(*step);
    for (const auto& h : held_) add(*h);
    for (auto& g : gone) std::sort(g.begin(), g.end());
    std::vector<std::vector<uint64_t>> dropped(nt);
    std::vector<int64_t> slots;
    for (const auto& h : step->exchanges) {
        if (h->handle) h->handle->wait();
        slots.resize(h->recv_slot.size());
        for (size_t q = 0; q < slots.size(); ++q) {
            const auto i = static_cast<size_t>(h->recv_table[q]);
            const uint64_t id = h->recv_id[q];
            if (h->recv_slot[q] < 0) {
                slots[q] = -1;  // it read the default row (or zeros)
            } else if (std::binary_search(gone[i].begin(), gone[i].end(), id)) {
                slots[q] = kDroppedSlot;
                dropped[i].push_back(id);
            } else {
                slots[q] = tables_[i]->find(id);
                ZT_ASSERT(slots[q] >= 0, "dynamic table ", tables_[i]->options().name, ": id ", id,
                          " had a row at its lookup, did not leave, and has none now");
            }
        }
        accept_grads(h->recv_table, slots, h->recv_counts, comm_ ? h->recv.data() : h->send.data());
    }
    for (auto& d : dropped) {
        std::sort(d.begin(), d.end());
        stale_dropped_ += std::unique(d.begin(), d.end()) - d.begin();
    }
}

// Collective (the default rows' sums): every held step lands, oldest first, as its own update;
// the tables' step goes on (no evictions). Each landing unpins its tier rows before the next.
void DynamicTables::apply_held(double lr, double base_lr, int64_t update) {
    const double rate = options_.lr > 0 && base_lr > 0 ? options_.lr * (lr / base_lr) : lr;
    while (!held_.empty()) {
        land_oldest();
        merge_grads();
        reduce_default_grads();
        for (size_t i = 0; i < tables_.size(); ++i) {
            update_table(i, static_cast<float>(rate), update);
            tables_[i]->unpin();
        }
        zero_grads();
    }
}

}  // namespace zt
