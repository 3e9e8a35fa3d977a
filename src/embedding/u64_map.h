// U64Map: an open-addressing hash map from a raw 64-bit id to a non-negative int64 value (a row
// slot or an index), with linear probing and backward-shift deletion (no tombstones, so lookups
// never slow down after many evictions). Every u64 is a valid key: emptiness is marked in the value
// (-1), not in the key. The capacity is a power of two that doubles (a full rehash) when the load
// passes kMaxLoad, so the map grows without a fixed capacity. Keys are spread by splitmix64, so
// sequential or strided ids do not cluster. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zt {

class U64Map {
  public:
    static constexpr double kMaxLoad = 0.75;  // grow past this fraction of slots used
    static constexpr int64_t kMinCapacity = 16;

    explicit U64Map(int64_t expected = 0) { reserve(expected); }

    int64_t size() const { return size_; }
    int64_t capacity() const { return static_cast<int64_t>(vals_.size()); }
    double load_factor() const {
        return vals_.empty() ? 0.0 : static_cast<double>(size_) / static_cast<double>(capacity());
    }
    int64_t bytes() const { return capacity() * 16; }
    int64_t resizes() const { return resizes_; }

    // The value of key, or -1.
    int64_t find(uint64_t key) const;
    // Inserts key (absent) with value v >= 0.
    void insert(uint64_t key, int64_t v);
    // Sets the value of a present key.
    void set(uint64_t key, int64_t v);
    // Removes key; false when absent.
    bool erase(uint64_t key);
    void clear();
    // Room for n keys without a rehash.
    void reserve(int64_t n);

  private:
    size_t home(uint64_t key) const;
    size_t probe(uint64_t key) const;  // the slot holding key, or the empty slot ending its run
    void rehash(int64_t capacity);

    std::vector<uint64_t> keys_;
    std::vector<int64_t> vals_;  // -1: empty
    int64_t size_ = 0;
    int64_t resizes_ = 0;
};

}  // namespace zt
