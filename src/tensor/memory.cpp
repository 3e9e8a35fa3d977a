#include "tensor/memory.h"

#include <cstdlib>
#include <sstream>

#include "util/error.h"
#include "util/units.h"

namespace zt {

const char* mem_category_name(MemCategory c) {
    static const char* kNames[] = {"params",      "grads", "optimizer",
                                   "activations", "comm",  "workspace"};
    return kNames[static_cast<int>(c)];
}

namespace {
size_t round_size(size_t bytes) {
    return (bytes + MemoryPool::kAlignment - 1) / MemoryPool::kAlignment * MemoryPool::kAlignment;
}
}  // namespace

MemoryPool::~MemoryPool() { trim(); }

void* MemoryPool::allocate(size_t bytes, MemCategory category) {
    size_t size = round_size(bytes == 0 ? 1 : bytes);
    int c = static_cast<int>(category);
    std::lock_guard<std::mutex> lock(mu_);
    if (budget_ > 0 && stats_.total_current + static_cast<int64_t>(size) > budget_) {
        std::ostringstream os;
        os << "out of memory: allocating " << format_bytes(size) << " of " << mem_category_name(category)
           << " would pass the per-rank budget of " << format_bytes(budget_) << "\n"
           << memory_report(stats_, budget_)
           << "fix: raise memory.budget_per_rank, lower train_micro_batch_size_per_gpu, or turn on "
              "activation_checkpointing";
        throw Error(ErrorKind::kInput, __FILE__, __LINE__, os.str());
    }
    void* ptr = nullptr;
    auto it = cache_.find(size);
    if (it != cache_.end() && !it->second.empty()) {
        ptr = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= static_cast<int64_t>(size);
    } else {
        ptr = std::aligned_alloc(kAlignment, size);
        if (ptr == nullptr) {  // give cached blocks back and try once more
            for (auto& [sz, blocks] : cache_)
                for (void* p : blocks) std::free(p);
            stats_.reserved -= cached_bytes_;
            cached_bytes_ = 0;
            cache_.clear();
            ptr = std::aligned_alloc(kAlignment, size);
            ZT_CHECK(ptr != nullptr, "out of memory: the system refused ", format_bytes(size),
                     " for ", mem_category_name(category), "\n", memory_report(stats_, budget_));
        }
        stats_.reserved += static_cast<int64_t>(size);
        ++stats_.system_allocs;
    }
    stats_.current[c] += static_cast<int64_t>(size);
    if (stats_.current[c] > stats_.peak[c]) stats_.peak[c] = stats_.current[c];
    stats_.total_current += static_cast<int64_t>(size);
    if (stats_.total_current > stats_.total_peak) stats_.total_peak = stats_.total_current;
    return ptr;
}

void MemoryPool::release(void* ptr, size_t bytes, MemCategory category) {
    if (ptr == nullptr) return;
    size_t size = round_size(bytes == 0 ? 1 : bytes);
    int c = static_cast<int>(category);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.current[c] -= static_cast<int64_t>(size);
    stats_.total_current -= static_cast<int64_t>(size);
    cache_[size].push_back(ptr);
    cached_bytes_ += static_cast<int64_t>(size);
}

MemoryStats MemoryPool::stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
}

void MemoryPool::reset_peaks() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak = stats_.current;
    stats_.total_peak = stats_.total_current;
}

void MemoryPool::trim() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [sz, blocks] : cache_)
        for (void* p : blocks) std::free(p);
    stats_.reserved -= cached_bytes_;
    cached_bytes_ = 0;
    cache_.clear();
}

std::string memory_report(const MemoryStats& stats, int64_t budget) {
    std::ostringstream os;
    os << "  category      current        peak\n";
    for (int c = 0; c < kMemCategoryCount; ++c) {
        char line[128];
        std::snprintf(line, sizeof line, "  %-12s %12s %12s\n",
                      mem_category_name(static_cast<MemCategory>(c)),
                      format_bytes(stats.current[c]).c_str(), format_bytes(stats.peak[c]).c_str());
        os << line;
    }
    os << "  total        " << format_bytes(stats.total_current) << " (peak "
       << format_bytes(stats.total_peak) << ")";
    if (budget > 0) os << ", budget " << format_bytes(budget);
    os << "\n";
    return os.str();
}

}  // namespace zt
