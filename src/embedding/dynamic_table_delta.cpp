// DynamicTable's incremental checkpoint blocks (docs/embedding-dynamic.md, "Incremental
// checkpoints"): what changed since the last mark, and applying such a block to the whole block of
// the state at that mark. Invariant: apply_delta(save() at the mark, save_delta() later) equals
// save() later, word for word and bit for bit (slots included).
#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "embedding/dynamic_table.h"
#include "util/error.h"

namespace zt {

// Note [Incremental table state]
// A row changes only where see() sights it (its last-seen step and count, then the step's sparse
// update of the rows sighted), where it is admitted, or where an eviction moves it into another
// slot; changed_ marks those slots. A row that is none of these keeps its slot, values, state,
// last-seen step and count, so a delta leaves it out. save_delta() writes words (u64): version 2,
// rows n now, changed rows c, pending p, left L, log_kept, log_from, step, admissions, evictions,
// has default row, rows at the mark, step at the mark; then the c slots (ascending), their ids,
// last-seen steps and counts, the p pending ids, counts and last-seen steps (whole: the pending
// map holds only the ids of the last evict.unseen_steps steps, or the ids seen fewer than
// min_count times, and an exact copy is simpler than a second change log), then the L ids that
// left since the mark. weights: the c rows, then the default row; state likewise.
// Applying it to the mark's save(): rows [0, min(n0, n)) are kept, each changed row is written at
// its slot, the table is cut to n rows; every slot past the mark's rows must be a changed one, and
// no kept row may be an id that left (else the block and its base do not belong together). The
// eviction log is the mark's first log_kept entries (all, or none after an export took them), then
// the ids that left from log_from on. The result is the later save() exactly, so a chain of deltas
// resumes bit for bit, and resharding reads a whole block per old rank as before.

void DynamicTable::track_changes(bool on) {
    track_ = on;
    mark_saved();
}

void DynamicTable::mark_saved() {
    changed_.assign(ids_.size(), 0);
    left_.clear();
    log_kept_ = static_cast<int64_t>(evicted_.size());
    log_from_ = 0;
    mark_rows_ = rows();
    mark_step_ = step_;
}

bool DynamicTable::is_delta(const std::vector<uint64_t>& words) {
    return !words.empty() && words[0] == kDeltaVersion;
}

DynamicTable::Saved DynamicTable::save_delta() const {
    ZT_ASSERT(track_, "dynamic table ", options_.name, ": save_delta without track_changes");
    std::vector<int64_t> slots;
    for (size_t i = 0; i < changed_.size(); ++i)
        if (changed_[i]) slots.push_back(static_cast<int64_t>(i));
    const bool def = default_w_.defined();
    auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
    Saved s;
    s.words = {kDeltaVersion,
               u(rows()),
               u(static_cast<int64_t>(slots.size())),
               u(static_cast<int64_t>(pending_ids_.size())),
               u(static_cast<int64_t>(left_.size())),
               u(log_kept_),
               u(log_from_),
               u(step_),
               u(admissions_),
               u(evictions_),
               def ? 1u : 0u,
               u(mark_rows_),
               u(mark_step_)};
    for (int64_t k : slots) s.words.push_back(u(k));
    for (int64_t k : slots) s.words.push_back(ids_[static_cast<size_t>(k)]);
    for (int64_t k : slots) s.words.push_back(u(last_seen_[static_cast<size_t>(k)]));
    for (int64_t k : slots) s.words.push_back(u(count_[static_cast<size_t>(k)]));
    s.words.insert(s.words.end(), pending_ids_.begin(), pending_ids_.end());
    for (int64_t v : pending_count_) s.words.push_back(u(v));
    for (int64_t v : pending_seen_) s.words.push_back(u(v));
    s.words.insert(s.words.end(), left_.begin(), left_.end());
    const int64_t d = options_.dim;
    s.weights.resize(slots.size() * static_cast<size_t>(d));
    s.state.resize(slots.size() * static_cast<size_t>(state_cols_));
    rows_->read(slots, s.weights.data(), s.state.data());  // the tier's cache or store
    if (def) s.weights.insert(s.weights.end(), default_row(), default_row() + d);
    if (state_cols_ > 0) {
        if (def)
            s.state.insert(s.state.end(), default_s_.data<float>(),
                           default_s_.data<float>() + state_cols_);
    }
    return s;
}

void DynamicTable::apply_delta(Saved& base, const Saved& delta) const {
    const std::string& name = options_.name;
    const View b = view(base);
    const std::vector<uint64_t>& w = delta.words;
    ZT_CHECK(is_delta(w) && static_cast<int64_t>(w.size()) >= kDeltaHeader, "dynamic table ", name,
             ": an incremental checkpoint block of an unknown format (version ",
             w.empty() ? 0 : w[0], ", this build reads ", kDeltaVersion, ")");
    const auto n = static_cast<int64_t>(w[1]), c = static_cast<int64_t>(w[2]);
    const auto p = static_cast<int64_t>(w[3]), L = static_cast<int64_t>(w[4]);
    const auto kept = static_cast<int64_t>(w[5]), from = static_cast<int64_t>(w[6]);
    const bool def = w[10] != 0;
    const int64_t d = options_.dim, sc = state_cols_, extra = def ? 1 : 0;
    ZT_CHECK(n >= 0 && c >= 0 && p >= 0 && L >= 0 && c <= n && def == b.def &&
                 static_cast<int64_t>(w.size()) == kDeltaHeader + 4 * c + 3 * p + L &&
                 static_cast<int64_t>(delta.weights.size()) == (c + extra) * d &&
                 static_cast<int64_t>(delta.state.size()) == (c + extra) * sc,
             "dynamic table ", name, ": an incremental checkpoint block whose sizes do not match (",
             c, " changed rows of dim ", d, " with ", sc,
             " state values each); resume with the dim and optimizer it was written with");
    ZT_CHECK(
        static_cast<int64_t>(w[11]) == b.n && w[12] == base.words[4] && kept <= b.e && from <= L,
        "dynamic table ", name, ": an incremental checkpoint block follows a state of ", w[11],
        " rows at step ", w[12], ", but the checkpoint before it holds ", b.n, " rows at step ",
        base.words[4], ": the chain of checkpoints is broken");
    const uint64_t* slot = w.data() + kDeltaHeader;
    const uint64_t* ids = slot + c;
    const uint64_t* seen = ids + c;
    const uint64_t* count = seen + c;
    const uint64_t* pending = count + c;
    const uint64_t* left = pending + 3 * p;

    Saved out;
    const int64_t keep = std::min(b.n, n);
    std::vector<uint64_t> rid(b.ids, b.ids + keep), rseen(b.seen, b.seen + keep),
        rcount(b.count, b.count + keep);
    rid.resize(static_cast<size_t>(n));
    rseen.resize(static_cast<size_t>(n));
    rcount.resize(static_cast<size_t>(n));
    out.weights.assign(base.weights.begin(), base.weights.begin() + keep * d);
    out.weights.resize(static_cast<size_t>((n + extra) * d));
    out.state.assign(base.state.begin(), base.state.begin() + keep * sc);
    out.state.resize(static_cast<size_t>((n + extra) * sc));
    std::vector<uint8_t> written(static_cast<size_t>(n), 0);
    for (int64_t k = 0; k < c; ++k) {
        const auto s = static_cast<int64_t>(slot[k]);
        ZT_CHECK(s < n && !written[static_cast<size_t>(s)], "dynamic table ", name,
                 ": an incremental checkpoint block writes slot ", slot[k], " of ", n,
                 " twice or past the rows");
        const auto us = static_cast<size_t>(s);
        written[us] = 1;
        rid[us] = ids[k];
        rseen[us] = seen[k];
        rcount[us] = count[k];
        std::memcpy(out.weights.data() + s * d, delta.weights.data() + k * d,
                    static_cast<size_t>(d) * 4);
        if (sc > 0)
            std::memcpy(out.state.data() + s * sc, delta.state.data() + k * sc,
                        static_cast<size_t>(sc) * 4);
    }
    if (def) {
        std::copy_n(delta.weights.data() + c * d, d, out.weights.data() + n * d);
        std::copy_n(delta.state.data() + c * sc, sc, out.state.data() + n * sc);
    }
    // A kept row must be one that stayed: not new, not an id that left, not an id twice.
    const std::unordered_set<uint64_t> gone(left, left + L);
    std::unordered_set<uint64_t> seen_ids;
    seen_ids.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        const auto ui = static_cast<size_t>(i);
        ZT_CHECK(
            (written[ui] || (i < b.n && !gone.count(rid[ui]))) && seen_ids.insert(rid[ui]).second,
            "dynamic table ", name, ": an incremental checkpoint block does not fit its base",
            " at slot ", i, " (id ", rid[ui], "): the chain of checkpoints is broken");
    }
    auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
    const int64_t e = kept + (L - from);
    out.words = {kSaveVersion, u(n), u(p), u(e), w[7], w[8], w[9], def ? 1u : 0u};
    out.words.insert(out.words.end(), rid.begin(), rid.end());
    out.words.insert(out.words.end(), rseen.begin(), rseen.end());
    out.words.insert(out.words.end(), rcount.begin(), rcount.end());
    out.words.insert(out.words.end(), pending, pending + 3 * p);
    out.words.insert(out.words.end(), b.evicted, b.evicted + kept);
    out.words.insert(out.words.end(), left + from, left + L);
    base = std::move(out);
}

}  // namespace zt
