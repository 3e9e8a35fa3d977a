#include "data/click/click_dataset.h"

#include <algorithm>
#include <cstring>

#include "data/tokens/token_dataset.h"  // epoch_permutation
#include "util/error.h"
#include "util/radix_sort.h"

namespace zt {

ClickBatch ClickBatchBuffers::view() const {
    ClickBatch b;
    b.B = B;
    b.F = F;
    b.dense = dense;
    b.labels = labels;
    for (size_t k = 0; k < ids.size(); ++k) {
        b.ids.emplace_back(ids[k]);
        b.offsets.emplace_back(offsets[k]);
        b.weights.emplace_back(k < weights.size() ? std::span<const float>(weights[k])
                                                  : std::span<const float>());
    }
    if (distinct.size() == ids.size() && distinct_index.size() == ids.size())
        for (size_t k = 0; k < ids.size(); ++k) {
            b.distinct.emplace_back(distinct[k]);
            b.distinct_index.emplace_back(distinct_index[k]);
        }
    return b;
}

Batch click_batch(const ClickBatchBuffers& buf, ClickBatch& click) {
    click = buf.view();
    Batch b;
    b.B = click.B;
    b.click = &click;
    return b;
}

ClickDataset::ClickDataset(std::shared_ptr<const CtrFile> file, ClickDatasetOptions opts)
    : file_(std::move(file)), opts_(opts) {
    ZT_ASSERT(file_ != nullptr);
    const int64_t n = file_->records();
    begin_ = opts.begin;
    end_ = opts.end < 0 ? n : opts.end;
    ZT_CHECK(begin_ >= 0 && begin_ < end_ && end_ <= n, "click data ", file_->path(),
             ": record range [", begin_, ", ", end_, ") is empty or outside the file's ", n,
             " records");
}

std::shared_ptr<const std::vector<int64_t>> ClickDataset::permutation(int64_t epoch) const {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        for (const auto& [e, perm] : cache_)
            if (e == epoch) return perm;
    }
    // Built outside the lock: two threads may both build it; they get the same values.
    auto perm =
        std::make_shared<const std::vector<int64_t>>(epoch_permutation(size(), opts_.seed, epoch));
    std::lock_guard<std::mutex> lock(mutex_);
    if (cache_.size() >= 2) cache_.erase(cache_.begin());
    cache_.emplace_back(epoch, perm);
    return perm;
}

int64_t ClickDataset::record_index(int64_t s) const {
    ZT_ASSERT(s >= 0, "global sample index ", s);
    const int64_t S = size(), epoch = s / S, r = s % S;
    return begin_ + (opts_.shuffle ? (*permutation(epoch))[static_cast<size_t>(r)] : r);
}

void ClickDataset::fill(int64_t first, int64_t count, ClickBatchBuffers& out) const {
    ZT_ASSERT(first >= 0 && count >= 0, "samples [", first, ", ", first + count, ")");
    const CtrFile& f = *file_;
    const int64_t F = f.dense_features();
    const int K = f.tables();
    const int64_t S = size();
    out.unique_ids.clear();  // the distinct-id index belongs to the batch it was made for
    out.distinct.clear();
    out.distinct_index.clear();
    // Record indices, one permutation lookup per epoch touched.
    std::vector<int64_t> rec(static_cast<size_t>(count));
    for (int64_t j = 0; j < count;) {
        const int64_t s = first + j, epoch = s / S, r0 = s % S;
        const int64_t n = std::min(count - j, S - r0);
        if (opts_.shuffle) {
            auto perm = permutation(epoch);
            for (int64_t i = 0; i < n; ++i) rec[j + i] = begin_ + (*perm)[r0 + i];
        } else {
            for (int64_t i = 0; i < n; ++i) rec[j + i] = begin_ + r0 + i;
        }
        j += n;
    }
    out.B = count;
    out.F = F;
    out.labels.resize(count);
    out.dense.resize(count * F);
    out.ids.resize(K);
    out.offsets.resize(K);
    out.weights.resize(K);
    const auto labels = f.labels();
    const auto dense = f.dense();
    // Records are read in shuffled order: each read below is a cache miss, so the reads a few
    // records ahead are started early (kAhead) and a bag's start is read once.
    constexpr int64_t kAhead = 16;
    for (int64_t j = 0; j < count; ++j) {
        const int64_t i = rec[j];
        if (j + kAhead < count && F > 0) __builtin_prefetch(dense.data() + rec[j + kAhead] * F);
        out.labels[j] = labels[i];
        if (F > 0) std::memcpy(&out.dense[j * F], &dense[i * F], sizeof(float) * F);
    }
    // Note [Records checked as they are copied]
    // Each record's bags are checked as they are read (the file is not validated when opened: a
    // large one opens at once). The check ran record by record over every table before the
    // copy, a second pass of random reads over the same offsets and ids: on the DLRM example
    // at batch 8192 it took 9% of the run's CPU (the fill's thread shares the step's 2 cores).
    // Now the offsets are checked in the pass that sums them and the ids on the copied bags, in
    // cache; a failure goes back to check_records record by record, so the error names the
    // same record, table and id as before.
    const auto fail = [&] {
        for (int64_t j = 0; j < count; ++j) f.check_records(rec[j], 1);
        ZT_ASSERT(false, "click data ", f.path(), ": a bag failed its check, no record did");
    };
    const auto rows = f.table_rows();
    std::vector<int64_t> start(static_cast<size_t>(count));
    for (int k = 0; k < K; ++k) {
        const auto off = f.offsets(k);
        const auto ids32 = f.ids32(k);
        const auto ids64 = f.ids64(k);
        const bool raw = f.raw_ids(k);
        const auto w = f.weights(k);
        const int64_t nnz = static_cast<int64_t>(raw ? ids64.size() : ids32.size());
        auto& o = out.offsets[k];
        o.resize(count + 1);
        o[0] = 0;
        bool ok = true;
        for (int64_t j = 0; j < count; ++j) {
            if (j + kAhead < count) __builtin_prefetch(off.data() + rec[j + kAhead]);
            const int64_t b = off[rec[j]], e = off[rec[j] + 1];
            ok &= b >= 0 && b <= e && e <= nnz;
            start[j] = b;
            o[j + 1] = o[j] + (e - b);
        }
        if (!ok) fail();
        out.ids[k].resize(o[count]);
        out.weights[k].resize(f.has_weights() ? o[count] : 0);
        int64_t* to = out.ids[k].data();
        for (int64_t j = 0; j < count; ++j) {
            const int64_t b = start[j], n = o[j + 1] - o[j];
            if (raw) {
                if (j + kAhead < count) __builtin_prefetch(ids64.data() + start[j + kAhead]);
                std::memcpy(to + o[j], ids64.data() + b, sizeof(int64_t) * n);
            } else {  // widened to int64 as it is copied
                if (j + kAhead < count) __builtin_prefetch(ids32.data() + start[j + kAhead]);
                for (int64_t p = 0; p < n; ++p) to[o[j] + p] = ids32[b + p];
            }
            if (f.has_weights())
                std::memcpy(out.weights[k].data() + o[j], w.data() + b, sizeof(float) * n);
        }
        if (raw) continue;  // any raw id is valid
        const auto limit = static_cast<uint64_t>(rows[static_cast<size_t>(k)]);
        bool in = true;
        for (int64_t id : out.ids[k]) in &= static_cast<uint64_t>(id) < limit;
        if (!in) fail();
    }
}

void index_distinct_ids(ClickBatchBuffers& b) {
    const size_t K = b.ids.size();
    b.unique_ids.assign(K, 0);
    b.distinct.resize(K);
    b.distinct_index.resize(K);
    std::vector<uint64_t> keys, tmp;
    for (size_t k = 0; k < K; ++k) {
        index_distinct(b.ids[k], b.distinct[k], b.distinct_index[k], keys, tmp);
        b.unique_ids[k] = static_cast<int64_t>(b.distinct[k].size());
    }
}

}  // namespace zt
