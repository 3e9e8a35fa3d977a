// EmbeddingBag kernels (see embedding_bag.h). The forward runs bags in parallel, each bag summing
// its rows in order. The backward sorts (id, position) pairs, so the positions of one row are
// adjacent and in order, then gives each distinct row to one thread: no atomics, no scratch of R
// rows, and the same bits for any thread count (Note [bag backward order]).
#include "tensor/kernels/embedding_bag.h"

#include <vector>

#include "tensor/kernels/vec16.h"
#include "tensor/threads.h"
#include "util/error.h"
#include "util/radix_sort.h"

namespace zt::kernels {

using namespace vec;

namespace {

constexpr int64_t kParallelMinElems = 1 << 14;  // below this, one thread is faster
// Rows are scattered over tables far larger than the caches: the loops prefetch the rows of the
// bag (forward) or distinct row (backward) this many steps ahead.
constexpr int64_t kPrefetchAhead = 8;
constexpr int64_t kPrefetchMaxBytes = 256;  // first 4 cache lines of a row

inline void prefetch_row(const void* row, int64_t bytes) {
    const char* p = static_cast<const char*>(row);
    for (int64_t off = 0; off < bytes && off < kPrefetchMaxBytes; off += 64)
        __builtin_prefetch(p + off);
}

// 1 / count for a mean bag (0 for an empty one, whose sum is zero anyway), else 1.
inline float bag_scale(const int64_t* offsets, int64_t b, BagMode mode) {
    const int64_t count = offsets[b + 1] - offsets[b];
    if (mode == BagMode::kSum) return 1.0f;
    return count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
}

}  // namespace

void embedding_bag_check(const int32_t* ids, int64_t nnz, const int64_t* offsets, int64_t B,
                         int64_t R) {
    ZT_CHECK(offsets[0] == 0, "embedding_bag: offsets[0] is ", offsets[0],
             ", expected 0 (offsets holds B + 1 bag starts, the first at 0)");
    for (int64_t b = 0; b < B; ++b)
        ZT_CHECK(offsets[b + 1] >= offsets[b], "embedding_bag: offsets[", b + 1,
                 "] = ", offsets[b + 1], " is below offsets[", b, "] = ", offsets[b],
                 "; offsets must be nondecreasing");
    ZT_CHECK(offsets[B] == nnz, "embedding_bag: offsets[", B, "] (the last of B + 1 = ", B + 1,
             " offsets) is ", offsets[B], ", expected nnz = ", nnz, " (the number of ids)");
    for (int64_t p = 0; p < nnz; ++p)
        ZT_CHECK(ids[p] >= 0 && ids[p] < R, "embedding_bag: id ", ids[p], " at position ", p,
                 " is out of range [0, ", R, "); ids must be in [0, R) for a table of R = ", R,
                 " rows");
}

template <typename T>
void embedding_bag_forward(const T* table, const int32_t* ids, int64_t nnz, const int64_t* offsets,
                           const float* weights, BagMode mode, T* out, int64_t B, int64_t R,
                           int64_t D) {
    embedding_bag_check(ids, nnz, offsets, B, R);
#pragma omp parallel for schedule(static) if (nnz * D >= parallel_min_elems(kParallelMinElems))
    for (int64_t b = 0; b < B; ++b) {
        if (b + kPrefetchAhead < B)
            for (int64_t p = offsets[b + kPrefetchAhead]; p < offsets[b + kPrefetchAhead + 1]; ++p)
                prefetch_row(table + static_cast<int64_t>(ids[p]) * D, D * sizeof(T));
        const int64_t p0 = offsets[b], p1 = offsets[b + 1];
        const V16 scale = splat(bag_scale(offsets, b, mode));
        for_each_vec(D, [&](int64_t j, int64_t n) {
            V16 acc = zero();
            for (int64_t p = p0; p < p1; ++p) {
                V16 row = load_part(table + static_cast<int64_t>(ids[p]) * D + j, n);
                acc = weights ? fma(row, splat(weights[p]), acc) : acc + row;
            }
            store_part(out + b * D + j, acc * scale, n);
        });
    }
}

// Note [bag backward order]
// dtable[r] += sum over positions p with ids[p] == r of c_p dout[bag(p)], c_p = w_p * scale_bag.
// Keys (id, p) sorted by id then p put each row's terms together in order of p; one thread sums
// a row's terms from zero in that order and adds the sum into dtable once. The split of rows over
// threads changes which thread does a row, never the order inside it, so any thread count gives
// the same bits. Sorting costs O(nnz log nnz) and touches no row that the step did not use.
template <typename T>
void embedding_bag_backward(const T* dout, const int32_t* ids, int64_t nnz, const int64_t* offsets,
                            const float* weights, BagMode mode, float* dtable, int64_t B, int64_t R,
                            int64_t D) {
    embedding_bag_check(ids, nnz, offsets, B, R);
    ZT_CHECK(nnz < (int64_t{1} << 32) && B < (int64_t{1} << 31), "embedding_bag: backward of ", nnz,
             " ids in ", B, " bags; at most 2^32 ids and 2^31 bags per call, split the batch");
    // keys: id in the high 32 bits, position in the low, so sorting orders by (id, position).
    std::vector<uint64_t> keys(static_cast<size_t>(nnz));
    std::vector<int32_t> bag_of(static_cast<size_t>(nnz));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t p = offsets[b]; p < offsets[b + 1]; ++p) {
            keys[p] = static_cast<uint64_t>(ids[p]) << 32 | static_cast<uint64_t>(p);
            bag_of[p] = static_cast<int32_t>(b);
        }
    // Stable, so each id's positions stay in order: O(nnz) a pass over the bits an id below R has.
    std::vector<uint64_t> tmp;
    radix_sort_field(keys, 32, bits_below(R), tmp);
    std::vector<int64_t> starts;  // first key of each distinct row, then nnz
    for (int64_t e = 0; e < nnz; ++e)
        if (e == 0 || keys[e] >> 32 != keys[e - 1] >> 32) starts.push_back(e);
    starts.push_back(nnz);
    const int64_t rows = static_cast<int64_t>(starts.size()) - 1;
    auto row_of = [&](int64_t r) {
        return dtable + static_cast<int64_t>(keys[starts[r]] >> 32) * D;
    };
#pragma omp parallel for schedule(static) if (nnz * D >= parallel_min_elems(kParallelMinElems))
    for (int64_t r = 0; r < rows; ++r) {
        if (r + kPrefetchAhead < rows) prefetch_row(row_of(r + kPrefetchAhead), D * sizeof(float));
        const int64_t e0 = starts[r], e1 = starts[r + 1];
        float* dst = row_of(r);
        for_each_vec(D, [&](int64_t j, int64_t n) {
            V16 acc = zero();
            for (int64_t e = e0; e < e1; ++e) {
                const int64_t pos = static_cast<int64_t>(keys[e] & 0xffffffffu), bag = bag_of[pos];
                float c = bag_scale(offsets, bag, mode);
                if (weights) c *= weights[pos];
                acc = fma(load_part(dout + bag * D + j, n), splat(c), acc);
            }
            store_part(dst + j, load_part(dst + j, n) + acc, n);
        });
    }
}

#define ZT_INSTANTIATE(T)                                                                         \
    template void embedding_bag_forward<T>(const T*, const int32_t*, int64_t, const int64_t*,     \
                                           const float*, BagMode, T*, int64_t, int64_t, int64_t); \
    template void embedding_bag_backward<T>(const T*, const int32_t*, int64_t, const int64_t*,    \
                                            const float*, BagMode, float*, int64_t, int64_t,      \
                                            int64_t);
ZT_INSTANTIATE(float)
ZT_INSTANTIATE(bf16)
ZT_INSTANTIATE(f16)
#undef ZT_INSTANTIATE

}  // namespace zt::kernels
