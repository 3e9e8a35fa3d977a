// Stable LSD radix sort of 64-bit keys on a bit field, 8 bits a pass: O(n) a pass, about twice as
// fast as a comparison sort for the few thousand ids of a batch. Used by the embedding-bag
// backward (ids by row), the sharded-table exchange (gradient rows by row) and the click data's
// distinct-id index (index_distinct).
#pragma once

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

// The distinct values of ids, ascending as unsigned 32-bit numbers (so a negative id, which no
// table accepts, sorts last: every id is in [0, R) exactly when uniq is empty or uniq.back() is),
// and each position's index into them: ids[p] == uniq[index[p]]. One radix sort of (id,
// position) keys over the bits the largest id needs. keys and tmp are scratch.
inline void index_distinct(std::span<const int32_t> ids, std::vector<int32_t>& uniq,
                           std::vector<int32_t>& index, std::vector<uint64_t>& keys,
                           std::vector<uint64_t>& tmp) {
    const size_t n = ids.size();
    uniq.clear();
    index.resize(n);
    keys.resize(n);
    uint32_t top = 0;
    for (size_t p = 0; p < n; ++p) {
        const auto id = static_cast<uint32_t>(ids[p]);
        top = id > top ? id : top;
        keys[p] = static_cast<uint64_t>(id) << 32 | p;
    }
    radix_sort_field(keys, 32, bits_below(static_cast<int64_t>(top) + 1), tmp);
    for (size_t e = 0; e < n; ++e) {
        const auto id = static_cast<int32_t>(static_cast<uint32_t>(keys[e] >> 32));
        if (e == 0 || uniq.back() != id) uniq.push_back(id);
        index[keys[e] & 0xffffffffu] = static_cast<int32_t>(uniq.size() - 1);
    }
}

}  // namespace zt
