// Tracked memory pool: every byte a rank holds for training comes from here, tagged by category,
// by the module that allocated it and by the phase (forward, backward, optimizer, ...). Freed
// blocks are cached by exact size and reused, so a steady training loop stops calling the system
// allocator after its first step. A budget (0 = none) caps live bytes like an accelerator's memory:
// going past it is an out-of-memory error with the breakdown, the largest live tensors and what
// would fit. One pool per rank, passed by reference, never global. See Note [Pool guarantees].
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace zt {

// Note [Pool guarantees]
// - Every block is at least kAlignment-aligned and its size is rounded up to a multiple of it;
//   stats count rounded bytes.
// - A freed block goes to a cache keyed by its size class and is handed out again for the next
//   request of that class (last freed, first reused). A loop that repeats the same sequence of
//   requests therefore makes system allocations only in its first iteration (stats.system_allocs).
//   Below kClassMinBytes the class is the rounded size; from it on, sizes round up to 8 classes
//   per power of two (at most 12.5% more reserved than requested), so requests whose size varies
//   a little from step to step (a sparse batch's distinct rows) reuse blocks instead of taking
//   fresh pages from the system each step. Live bytes (current, peak, budget) count the rounded
//   request; reserved bytes count the class.
// - The budget caps live bytes: an allocation that would take the live total past it throws
//   (ErrorKind::kInput) before anything changes. Cached blocks count too when a request needs a
//   new system block: cached blocks of other sizes are returned to the system first (largest
//   first) so that reserved bytes stay within the budget, as on an accelerator.
// - Each live block remembers (bytes, category, module, phase) from the context current at its
//   allocation; the report lists the largest. An event sink sees every allocation and free in
//   order, under the pool's lock.
// - Not tracked: memory the kernels take from the C++ heap for small per-thread scratch
//   (layernorm backward's partial sums, softmax's row buffer), the tape's closures, host vectors.

enum class MemCategory : uint8_t {
    kParams = 0,
    kGrads,
    kOptimizer,
    kActivations,
    kComm,
    kWorkspace,
    kEmbedding,  // sharded embedding tables and their sparse optimizer state
    kCount
};
constexpr int kMemCategoryCount = static_cast<int>(MemCategory::kCount);
const char* mem_category_name(MemCategory c);  // "params", "grads", ...

// What the rank is doing when it allocates.
enum class MemPhase : uint8_t { kForward = 0, kBackward, kOptimizer, kComm, kOther, kCount };
constexpr int kMemPhaseCount = static_cast<int>(MemPhase::kCount);
// "forward", "backward", "optimizer", "communication", "other"
const char* mem_phase_name(MemPhase p);

struct MemoryStats {
    std::array<int64_t, kMemCategoryCount> current{};  // live bytes per category
    std::array<int64_t, kMemCategoryCount> peak{};     // high-water mark per category
    int64_t total_current = 0;
    int64_t total_peak = 0;     // high-water mark of the sum over categories
    int64_t reserved = 0;       // live plus cached bytes held from the system
    int64_t system_allocs = 0;  // calls to the system allocator so far
    int64_t live_blocks = 0;
};

// The allocation context: module id (interned by the pool; 0 = no module) and phase.
struct MemContext {
    uint32_t module = 0;
    MemPhase phase = MemPhase::kOther;
};

struct MemoryEvent {
    enum class Op : uint8_t { kAlloc, kFree, kOom };  // kOom: a refused request (nothing changes)
    Op op;
    int64_t bytes;  // rounded
    MemCategory category;
    MemPhase phase;   // phase current at the event
    uint32_t module;  // the block's module (for a free: the module that allocated it)
    const std::string* module_name;  // valid during the call only
};

// Receives every event of a pool (runtime/memory_timeline.h writes them to a file). Called with the
// pool's lock held, in event order: must not call into the pool and must not throw (frees run in
// destructors); record failures and report them later.
class MemoryEventSink {
  public:
    virtual ~MemoryEventSink() = default;
    virtual void on_event(const MemoryEvent& event) noexcept = 0;
};

// One line of the out-of-memory report: `count` live blocks of `bytes` each.
struct LiveTensorGroup {
    int64_t bytes = 0;
    int64_t count = 0;
    MemCategory category = MemCategory::kActivations;
    MemPhase phase = MemPhase::kOther;
    std::string module;  // "" when allocated outside any module
};

// Says what would make a run fit, from the state at a refused allocation. Called under the pool's
// lock (must not call into the pool).
using OomAdvisor =
    std::function<std::string(const MemoryStats& stats, int64_t budget, int64_t request)>;

class MemoryPool {
  public:
    static constexpr size_t kAlignment = 64;            // bytes; one cache line, an AVX-512 vector
    static constexpr size_t kClassMinBytes = 64 << 10;  // Note [Pool guarantees]: size classes

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

    // Allocation context (see MemScope for the scoped form).
    MemContext context() const;
    void set_context(MemContext c);
    // Sets the module (interned by name) and phase; returns the previous context.
    MemContext push_context(std::string_view module, MemPhase phase);
    // Sets the phase only; returns the previous context.
    MemContext push_phase(MemPhase phase);
    const std::string& module_name(uint32_t id) const;

    // Largest live blocks, grouped by (bytes, category, module, phase), largest first.
    std::vector<LiveTensorGroup> largest_live(size_t n) const;
    // Live bytes per module, largest first.
    std::vector<std::pair<std::string, int64_t>> live_by_module(size_t n) const;

    // The sink is borrowed; pass nullptr to detach. It must outlive the pool or be detached first.
    void set_event_sink(MemoryEventSink* sink);
    // Replaces oom_advice (without hints) in the out-of-memory report (nullptr restores it).
    void set_oom_advisor(OomAdvisor advisor);

  private:
    struct Block {
        int64_t bytes;
        MemCategory category;
        MemPhase phase;
        uint32_t module;
    };
    uint32_t intern_locked(std::string_view name);
    void* system_alloc_locked(size_t size, MemCategory category);
    [[noreturn]] void throw_oom_locked(size_t size, MemCategory category);
    void emit_locked(MemoryEvent::Op op, const Block& b);
    std::vector<LiveTensorGroup> largest_live_locked(size_t n) const;
    std::vector<std::pair<std::string, int64_t>> live_by_module_locked(size_t n) const;

    mutable std::mutex mu_;
    MemoryStats stats_;
    int64_t budget_ = 0;
    int64_t cached_bytes_ = 0;
    std::unordered_map<size_t, std::vector<void*>> cache_;  // size class -> free blocks
    std::unordered_map<void*, Block> live_;
    MemContext context_;
    std::deque<std::string> module_names_{std::string()};  // id -> name; id 0: no module
    struct NameHash {
        using is_transparent = void;  // lookups by string_view allocate nothing
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>> module_ids_;
    MemoryEventSink* sink_ = nullptr;
    OomAdvisor advisor_;
};

// Sets the allocation context for its lifetime and restores the previous one after.
class MemScope {
  public:
    // Sets the phase, keeps the module.
    MemScope(MemoryPool& pool, MemPhase phase) : pool_(&pool), saved_(pool.push_phase(phase)) {}
    // Sets module and phase.
    MemScope(MemoryPool& pool, std::string_view module, MemPhase phase)
        : pool_(&pool), saved_(pool.push_context(module, phase)) {}
    ~MemScope() { pool_->set_context(saved_); }
    MemScope(const MemScope&) = delete;
    MemScope& operator=(const MemScope&) = delete;

  private:
    MemoryPool* pool_;
    MemContext saved_;
};

// Out-of-memory report text: bytes per category, peak, reserved and budget.
std::string memory_report(const MemoryStats& stats, int64_t budget);

// What the caller knows about the run, to make the advice concrete (0 or empty: unknown).
struct OomHints {
    int64_t micro_batch = 0;    // train_micro_batch_size_per_gpu
    int64_t grad_accum = 0;     // gradient_accumulation_steps
    std::string checkpointing;  // activation_checkpointing.policy
    std::string precision;      // "fp32", "bf16", "fp16"
};
// What would fit, computed from the categories: the activations' share and what a smaller
// micro-batch, activation checkpointing and bf16 would save; optimizer and gradient bytes; the
// budget needed. Settings the hints say are already on are not suggested.
std::string oom_advice(const MemoryStats& stats, int64_t budget, int64_t request,
                       const OomHints& hints = {});

}  // namespace zt
