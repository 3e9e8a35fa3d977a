// Tracked memory pool: every byte a rank holds for training comes from here, tagged by category.
// Freed blocks are cached by exact size and reused, so a steady training loop stops calling the
// system allocator after its first step. A budget (0 = none) turns overuse into an out-of-memory
// error that prints the breakdown. One pool per rank; it is passed by reference, never global.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace zt {

enum class MemCategory : uint8_t {
    kParams = 0,
    kGrads,
    kOptimizer,
    kActivations,
    kComm,
    kWorkspace,
    kCount
};
constexpr int kMemCategoryCount = static_cast<int>(MemCategory::kCount);

const char* mem_category_name(MemCategory c);  // "params", "grads", ...

struct MemoryStats {
    std::array<int64_t, kMemCategoryCount> current{};  // live bytes per category
    std::array<int64_t, kMemCategoryCount> peak{};     // high-water mark per category
    int64_t total_current = 0;
    int64_t total_peak = 0;   // high-water mark of the sum over categories
    int64_t reserved = 0;     // live plus cached bytes held from the system
    int64_t system_allocs = 0;  // calls to the system allocator so far
};

class MemoryPool {
public:
    static constexpr size_t kAlignment = 64;  // bytes; one cache line, an AVX-512 vector

    MemoryPool() = default;
    ~MemoryPool();
    MemoryPool(const MemoryPool&) = delete;
    MemoryPool& operator=(const MemoryPool&) = delete;

    void* allocate(size_t bytes, MemCategory category);
    void release(void* ptr, size_t bytes, MemCategory category);

    void set_budget(int64_t bytes) { budget_ = bytes; }
    int64_t budget() const { return budget_; }
    MemoryStats stats() const;
    // Starts a new peak window: peaks become the current values.
    void reset_peaks();
    // Returns cached blocks to the system.
    void trim();

private:
    mutable std::mutex mu_;
    MemoryStats stats_;
    int64_t budget_ = 0;
    int64_t cached_bytes_ = 0;
    std::unordered_map<size_t, std::vector<void*>> cache_;  // rounded size -> free blocks
};

// Out-of-memory report text: bytes per category, peak, budget.
std::string memory_report(const MemoryStats& stats, int64_t budget);

}  // namespace zt
