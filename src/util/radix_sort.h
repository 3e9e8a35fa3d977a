// Stable LSD radix sort of 64-bit keys on a bit field, 8 bits a pass: O(n) a pass, about twice as
// fast as a comparison sort for the few thousand ids of a batch. Used by the embedding-bag
// backward (ids by row), the sharded-table exchange (gradient rows by row) and the click data's
// distinct-id index (index_distinct).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace zt {

// The number of bits a value below `bound` needs (0 for bound <= 1).
inline int bits_below(int64_t bound) {
    int bits = 0;
    while (bits < 63 && (int64_t{1} << bits) < bound) ++bits;
    return bits;
}

// Sorts keys by bits [shift, shift + bits), stably (keys equal there keep their order); tmp is
// scratch, resized to keys.size().
inline void radix_sort_field(std::vector<uint64_t>& keys, int shift, int bits,
                             std::vector<uint64_t>& tmp) {
    tmp.resize(keys.size());
    for (int s = shift; s < shift + bits; s += 8) {
        size_t start[257] = {};
        for (uint64_t k : keys) ++start[((k >> s) & 0xff) + 1];
        for (int d = 0; d < 256; ++d) start[d + 1] += start[d];
        for (uint64_t k : keys) tmp[start[(k >> s) & 0xff]++] = k;
        keys.swap(tmp);
    }
}

// The distinct values of ids, ascending as unsigned 64-bit numbers (so a negative id, which no
// static table accepts, sorts last: every id is in [0, R) exactly when uniq is empty or
// uint64(uniq.back()) < R), and each position's index into them: ids[p] == uniq[index[p]]. Ids
// below 2^32 (every static table's) take one radix sort of (id, position) keys over the bits the
// largest id needs; a batch with a wider id (a dynamic table's raw 64-bit ids) sorts the ids with
// their positions beside them over as many bits. keys and tmp are scratch.
inline void index_distinct(std::span<const int64_t> ids, std::vector<int64_t>& uniq,
                           std::vector<int32_t>& index, std::vector<uint64_t>& keys,
                           std::vector<uint64_t>& tmp) {
    const size_t n = ids.size();
    uniq.clear();
    index.resize(n);
    keys.resize(n);
    uint64_t top = 0;
    for (size_t p = 0; p < n; ++p) {
        const auto id = static_cast<uint64_t>(ids[p]);
        top = id > top ? id : top;
    }
    if (top <= 0xffffffffu) {
        for (size_t p = 0; p < n; ++p) keys[p] = static_cast<uint64_t>(ids[p]) << 32 | p;
        radix_sort_field(keys, 32, bits_below(static_cast<int64_t>(top) + 1), tmp);
        for (size_t e = 0; e < n; ++e) {
            const auto id = static_cast<int64_t>(keys[e] >> 32);
            if (e == 0 || uniq.back() != id) uniq.push_back(id);
            index[keys[e] & 0xffffffffu] = static_cast<int32_t>(uniq.size() - 1);
        }
        return;
    }
    // Wide ids: keys are the ids, pos[e] the position keys[e] came from; both permute together.
    std::vector<uint32_t> pos(n), pos_tmp(n);
    for (size_t p = 0; p < n; ++p) {
        keys[p] = static_cast<uint64_t>(ids[p]);
        pos[p] = static_cast<uint32_t>(p);
    }
    tmp.resize(n);
    const int bits = std::bit_width(top);  // top >= 2^32 here
    for (int s = 0; s < bits; s += 8) {
        size_t start[257] = {};
        for (uint64_t k : keys) ++start[((k >> s) & 0xff) + 1];
        for (int d = 0; d < 256; ++d) start[d + 1] += start[d];
        for (size_t e = 0; e < n; ++e) {
            const size_t to = start[(keys[e] >> s) & 0xff]++;
            tmp[to] = keys[e];
            pos_tmp[to] = pos[e];
        }
        keys.swap(tmp);
        pos.swap(pos_tmp);
    }
    for (size_t e = 0; e < n; ++e) {
        const auto id = static_cast<int64_t>(keys[e]);
        if (e == 0 || uniq.back() != id) uniq.push_back(id);
        index[pos[e]] = static_cast<int32_t>(uniq.size() - 1);
    }
}

}  // namespace zt
