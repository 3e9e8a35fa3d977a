#include "embedding/u64_map.h"

#include <algorithm>

#include "util/error.h"
#include "util/random.h"

namespace zt {

size_t U64Map::home(uint64_t key) const {
    return static_cast<size_t>(splitmix64(key)) & (vals_.size() - 1);
}

size_t U64Map::probe(uint64_t key) const {
    const size_t mask = vals_.size() - 1;
    size_t i = home(key);
    while (vals_[i] >= 0 && keys_[i] != key) i = (i + 1) & mask;
    return i;
}

int64_t U64Map::find(uint64_t key) const {
    if (vals_.empty()) return -1;
    return vals_[probe(key)];
}

void U64Map::insert(uint64_t key, int64_t v) {
    ZT_ASSERT(v >= 0, "U64Map values are non-negative");
    if (static_cast<double>(size_ + 1) > kMaxLoad * static_cast<double>(capacity()))
        rehash(std::max<int64_t>(kMinCapacity, capacity() * 2));
    const size_t i = probe(key);
    ZT_ASSERT(vals_[i] < 0, "U64Map::insert of a present key");
    keys_[i] = key;
    vals_[i] = v;
    ++size_;
}

void U64Map::set(uint64_t key, int64_t v) {
    ZT_ASSERT(v >= 0 && !vals_.empty(), "U64Map::set of an absent key");
    const size_t i = probe(key);
    ZT_ASSERT(vals_[i] >= 0, "U64Map::set of an absent key");
    vals_[i] = v;
}

// Backward-shift deletion: the entries after the hole move back while their home slot does not
// lie cyclically in (hole, entry], so every remaining key stays reachable from its home.
bool U64Map::erase(uint64_t key) {
    if (vals_.empty()) return false;
    const size_t mask = vals_.size() - 1;
    size_t hole = probe(key);
    if (vals_[hole] < 0) return false;
    vals_[hole] = -1;
    --size_;
    for (size_t j = (hole + 1) & mask; vals_[j] >= 0; j = (j + 1) & mask) {
        const size_t h = home(keys_[j]);
        const bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
        if (stays) continue;
        keys_[hole] = keys_[j];
        vals_[hole] = vals_[j];
        vals_[j] = -1;
        hole = j;
    }
    return true;
}

void U64Map::clear() {
    std::fill(vals_.begin(), vals_.end(), -1);
    size_ = 0;
}

void U64Map::reserve(int64_t n) {
    int64_t cap = std::max<int64_t>(kMinCapacity, capacity());
    while (static_cast<double>(n) > kMaxLoad * static_cast<double>(cap)) cap *= 2;
    if (cap != capacity()) rehash(cap);
}

void U64Map::rehash(int64_t capacity) {
    std::vector<uint64_t> keys = std::move(keys_);
    std::vector<int64_t> vals = std::move(vals_);
    keys_.assign(static_cast<size_t>(capacity), 0);
    vals_.assign(static_cast<size_t>(capacity), -1);
    for (size_t i = 0; i < vals.size(); ++i)
        if (vals[i] >= 0) {
            const size_t j = probe(keys[i]);
            keys_[j] = keys[i];
            vals_[j] = vals[i];
        }
    if (!vals.empty()) ++resizes_;
}

}  // namespace zt
