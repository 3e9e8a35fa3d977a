#include "tensor/memory.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <tuple>

#include "util/error.h"
#include "util/units.h"

namespace zt {

const char* mem_category_name(MemCategory c) {
    static const char* kNames[] = {"params", "grads",     "optimizer", "activations",
                                   "comm",   "workspace", "embedding"};
    return kNames[static_cast<int>(c)];
}

const char* mem_phase_name(MemPhase p) {
    static const char* kNames[] = {"forward", "backward", "optimizer", "communication", "other"};
    return kNames[static_cast<int>(p)];
}

namespace {
size_t round_size(size_t bytes) {
    return (bytes + MemoryPool::kAlignment - 1) / MemoryPool::kAlignment * MemoryPool::kAlignment;
}
// The cache key and system size of a block of rounded size `size` (Note [Pool guarantees]).
size_t size_class(size_t size) {
    if (size < MemoryPool::kClassMinBytes) return size;
    const size_t step = std::bit_floor(size) / 8;  // a multiple of kAlignment from 64 KiB on
    return (size + step - 1) / step * step;
}
}  // namespace

MemoryPool::~MemoryPool() { trim(); }

void* MemoryPool::allocate(size_t bytes, MemCategory category) {
    size_t size = round_size(bytes == 0 ? 1 : bytes);
    int c = static_cast<int>(category);
    std::lock_guard<std::mutex> lock(mu_);
    if (budget_ > 0 && stats_.total_current + static_cast<int64_t>(size) > budget_)
        throw_oom_locked(size, category);
    void* ptr = nullptr;
    const size_t cls = size_class(size);
    auto it = cache_.find(cls);
    if (it != cache_.end() && !it->second.empty()) {
        ptr = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= static_cast<int64_t>(cls);
    } else {
        ptr = system_alloc_locked(cls, category);
    }
    stats_.current[c] += static_cast<int64_t>(size);
    if (stats_.current[c] > stats_.peak[c]) stats_.peak[c] = stats_.current[c];
    stats_.total_current += static_cast<int64_t>(size);
    if (stats_.total_current > stats_.total_peak) stats_.total_peak = stats_.total_current;
    Block b{static_cast<int64_t>(size), category, context_.phase, context_.module};
    live_.emplace(ptr, b);
    ++stats_.live_blocks;
    if (sink_) emit_locked(MemoryEvent::Op::kAlloc, b);
    return ptr;
}

// A new block from the system. With a budget, cached blocks are returned first (largest sizes
// first) until reserved bytes plus this block fit in it; without, only when the system refuses.
void* MemoryPool::system_alloc_locked(size_t size, MemCategory category) {
    auto free_cached_until = [&](int64_t limit) {
        std::vector<size_t> sizes;
        for (auto& [sz, blocks] : cache_)
            if (!blocks.empty()) sizes.push_back(sz);
        std::sort(sizes.rbegin(), sizes.rend());
        for (size_t sz : sizes) {
            std::vector<void*>& blocks = cache_[sz];
            while (!blocks.empty() && stats_.reserved + static_cast<int64_t>(size) > limit) {
                std::free(blocks.back());
                blocks.pop_back();
                stats_.reserved -= static_cast<int64_t>(sz);
                cached_bytes_ -= static_cast<int64_t>(sz);
            }
        }
    };
    if (budget_ > 0 && stats_.reserved + static_cast<int64_t>(size) > budget_)
        free_cached_until(budget_);
    void* ptr = std::aligned_alloc(kAlignment, size);
    if (ptr == nullptr) {  // give all cached blocks back and try once more
        free_cached_until(0);
        ptr = std::aligned_alloc(kAlignment, size);
        ZT_CHECK(ptr != nullptr, "out of memory: the system refused ", format_bytes(size), " for ",
                 mem_category_name(category), "\n", memory_report(stats_, budget_));
    }
    stats_.reserved += static_cast<int64_t>(size);
    ++stats_.system_allocs;
    return ptr;
}

void MemoryPool::release(void* ptr, size_t bytes, MemCategory category) {
    if (ptr == nullptr) return;
    size_t size = round_size(bytes == 0 ? 1 : bytes);
    int c = static_cast<int>(category);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.current[c] -= static_cast<int64_t>(size);
    stats_.total_current -= static_cast<int64_t>(size);
    const size_t cls = size_class(size);
    cache_[cls].push_back(ptr);
    cached_bytes_ += static_cast<int64_t>(cls);
    auto it = live_.find(ptr);
    if (it == live_.end()) return;  // not ours: a bug upstream; nothing sane to report from here
    Block b = it->second;
    live_.erase(it);
    --stats_.live_blocks;
    if (sink_) {
        b.phase = context_.phase;  // a free carries its block's module and the current phase
        emit_locked(MemoryEvent::Op::kFree, b);
    }
}

void MemoryPool::emit_locked(MemoryEvent::Op op, const Block& b) {
    sink_->on_event(
        MemoryEvent{op, b.bytes, b.category, b.phase, b.module, &module_names_[b.module]});
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

// ---- context, interning, sink ----

MemContext MemoryPool::context() const {
    std::lock_guard<std::mutex> lock(mu_);
    return context_;
}

void MemoryPool::set_context(MemContext c) {
    std::lock_guard<std::mutex> lock(mu_);
    context_ = c;
}

uint32_t MemoryPool::intern_locked(std::string_view name) {
    if (name.empty()) return 0;
    auto it = module_ids_.find(name);
    if (it != module_ids_.end()) return it->second;
    uint32_t id = static_cast<uint32_t>(module_names_.size());
    module_names_.emplace_back(name);
    module_ids_.emplace(module_names_.back(), id);
    return id;
}

MemContext MemoryPool::push_context(std::string_view module, MemPhase phase) {
    std::lock_guard<std::mutex> lock(mu_);
    MemContext prev = context_;
    context_ = MemContext{intern_locked(module), phase};
    return prev;
}

MemContext MemoryPool::push_phase(MemPhase phase) {
    std::lock_guard<std::mutex> lock(mu_);
    MemContext prev = context_;
    context_.phase = phase;
    return prev;
}

const std::string& MemoryPool::module_name(uint32_t id) const {
    std::lock_guard<std::mutex> lock(mu_);
    ZT_ASSERT(id < module_names_.size(), "unknown module id ", id);
    return module_names_[id];
}

void MemoryPool::set_event_sink(MemoryEventSink* sink) {
    std::lock_guard<std::mutex> lock(mu_);
    sink_ = sink;
}

void MemoryPool::set_oom_advisor(OomAdvisor advisor) {
    std::lock_guard<std::mutex> lock(mu_);
    advisor_ = std::move(advisor);
}

// ---- reports ----

std::vector<LiveTensorGroup> MemoryPool::largest_live(size_t n) const {
    std::lock_guard<std::mutex> lock(mu_);
    return largest_live_locked(n);
}

std::vector<std::pair<std::string, int64_t>> MemoryPool::live_by_module(size_t n) const {
    std::lock_guard<std::mutex> lock(mu_);
    return live_by_module_locked(n);
}

std::vector<LiveTensorGroup> MemoryPool::largest_live_locked(size_t n) const {
    std::map<std::tuple<int64_t, int, uint32_t, int>, int64_t> groups;  // O(live) on a report only
    for (const auto& [ptr, b] : live_)
        ++groups[{-b.bytes, static_cast<int>(b.category), b.module, static_cast<int>(b.phase)}];
    std::vector<LiveTensorGroup> out;
    for (const auto& [key, count] : groups) {
        if (out.size() == n) break;
        auto [neg_bytes, cat, module, phase] = key;
        out.push_back({-neg_bytes, count, static_cast<MemCategory>(cat),
                       static_cast<MemPhase>(phase), module_names_[module]});
    }
    return out;
}

std::vector<std::pair<std::string, int64_t>> MemoryPool::live_by_module_locked(size_t n) const {
    std::unordered_map<uint32_t, int64_t> sums;
    for (const auto& [ptr, b] : live_) sums[b.module] += b.bytes;
    std::vector<std::pair<std::string, int64_t>> out;
    for (const auto& [id, bytes] : sums) out.emplace_back(module_names_[id], bytes);
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
        return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    if (out.size() > n) out.resize(n);
    return out;
}

void MemoryPool::throw_oom_locked(size_t size, MemCategory category) {
    const int64_t request = static_cast<int64_t>(size);
    const std::string& module = module_names_[context_.module];
    if (sink_)
        emit_locked(MemoryEvent::Op::kOom,
                    Block{request, category, context_.phase, context_.module});
    std::ostringstream os;
    os << "out of memory: allocating " << format_bytes(static_cast<double>(size)) << " of "
       << mem_category_name(category) << " in " << (module.empty() ? "(no module)" : module) << " ("
       << mem_phase_name(context_.phase) << ") would take the live bytes to "
       << format_bytes(static_cast<double>(stats_.total_current + request))
       << ", past the per-rank budget of " << format_bytes(static_cast<double>(budget_)) << "\n"
       << memory_report(stats_, budget_) << "largest live tensors:\n";
    char line[256];
    for (const LiveTensorGroup& g : largest_live_locked(8)) {
        std::snprintf(line, sizeof line, "  %12s x %-4lld %-12s %-10s %s\n",
                      format_bytes(static_cast<double>(g.bytes)).c_str(),
                      static_cast<long long>(g.count), mem_category_name(g.category),
                      mem_phase_name(g.phase), g.module.empty() ? "(no module)" : g.module.c_str());
        os << line;
    }
    os << "live bytes by module:\n";
    for (const auto& [name, bytes] : live_by_module_locked(5)) {
        std::snprintf(line, sizeof line, "  %12s  %s\n",
                      format_bytes(static_cast<double>(bytes)).c_str(),
                      name.empty() ? "(no module)" : name.c_str());
        os << line;
    }
    os << (advisor_ ? advisor_(stats_, budget_, request) : oom_advice(stats_, budget_, request));
    throw Error(ErrorKind::kInput, __FILE__, __LINE__, os.str());
}

std::string memory_report(const MemoryStats& stats, int64_t budget) {
    std::ostringstream os;
    os << "  category      current        peak\n";
    for (int c = 0; c < kMemCategoryCount; ++c) {
        char line[128];
        std::snprintf(line, sizeof line, "  %-12s %12s %12s\n",
                      mem_category_name(static_cast<MemCategory>(c)),
                      format_bytes(static_cast<double>(stats.current[c])).c_str(),
                      format_bytes(static_cast<double>(stats.peak[c])).c_str());
        os << line;
    }
    os << "  total        " << format_bytes(static_cast<double>(stats.total_current)) << " (peak "
       << format_bytes(static_cast<double>(stats.total_peak)) << ")";
    if (budget > 0) os << ", budget " << format_bytes(static_cast<double>(budget));
    os << "; reserved " << format_bytes(static_cast<double>(stats.reserved)) << " ("
       << format_bytes(static_cast<double>(stats.reserved - stats.total_current))
       << " cached, not live)\n";
    return os.str();
}

std::string oom_advice(const MemoryStats& stats, int64_t budget, int64_t request,
                       const OomHints& hints) {
    auto at = [&](MemCategory c) {
        return static_cast<double>(stats.current[static_cast<int>(c)]);
    };
    auto fmt = [](double b) { return format_bytes(b); };
    const double live = static_cast<double>(stats.total_current);
    const double need = live + static_cast<double>(request) - static_cast<double>(budget);
    const double acts = at(MemCategory::kActivations) + at(MemCategory::kWorkspace);
    const double params = at(MemCategory::kParams), opt = at(MemCategory::kOptimizer);
    auto pct = [&](double b) { return live > 0 ? static_cast<int>(100.0 * b / live + 0.5) : 0; };
    auto enough = [&](double saved) {
        return saved >= need ? " (enough for this allocation)" : "";
    };
    std::ostringstream os;
    os << "what would fit (judged at this allocation: at least " << fmt(need)
       << " must go; later allocations of the step may need more):\n";
    if (acts > 0) {
        os << "  - activations and workspace are " << fmt(acts) << ", " << pct(acts)
           << "% of live bytes; they scale with the micro-batch: ";
        if (hints.micro_batch > 1) {
            int64_t b = hints.micro_batch / 2;
            os << "train_micro_batch_size_per_gpu " << hints.micro_batch << " -> " << b;
            if (hints.grad_accum > 0)
                os << " with gradient_accumulation_steps " << hints.grad_accum << " -> "
                   << hints.grad_accum * 2 << " (same train_batch_size)";
        } else if (hints.micro_batch == 1) {
            os << "the micro-batch is already 1 (use a shorter model.seq_len)";
        } else {
            os << "halving train_micro_batch_size_per_gpu (doubling gradient_accumulation_steps "
                  "keeps train_batch_size)";
        }
        if (hints.micro_batch != 1) os << " frees about " << fmt(acts / 2) << enough(acts / 2);
        os << "\n";
        if (hints.checkpointing.empty() || hints.checkpointing == "none")
            os << "  - \"activation_checkpointing\": {\"policy\": \"every\"} keeps only each "
                  "block's input and recomputes the rest in backward: frees most of "
               << fmt(at(MemCategory::kActivations)) << "\n";
        if (hints.precision.empty() || hints.precision == "fp32")
            os << "  - \"bf16\": {\"enabled\": true} stores activations in 2 bytes instead of 4: "
                  "about "
               << fmt(acts / 2) << " less, for a 2-byte copy of the weights (" << fmt(params / 2)
               << " more)\n";
    }
    if (opt > 0)
        os << "  - optimizer state is " << fmt(opt) << " (" << pct(opt)
           << "%): ZeRO stage 1 or more over N ranks keeps 1/N of it per rank\n";
    os << "  - or raise memory.budget_per_rank (--memory-budget) to more than "
       << fmt(live + static_cast<double>(request)) << "\n";
    return os.str();
}

}  // namespace zt
