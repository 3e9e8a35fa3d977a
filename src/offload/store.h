// A tier of memory outside the per-rank budget (shared/DESIGN.md, offload layer): a store of bytes
// addressed by (offset, size) ranges, read and written asynchronously with completion tickets.
// Types: HostStore (host memory: on a CPU-only machine, memory counted outside the budget that
// models the device's; offload/host_store.h) and NvmeStore (a swap file on a fast disk through
// io_uring and O_DIRECT; offload/nvme_store.h). Whoever uses a tier (the offloaded optimizer,
// ZeRO-3's parameters) sees only this interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace zt {

// Offsets, sizes and buffer addresses passed to a Store are multiples of this (O_DIRECT's rule;
// every store enforces it so code that runs on one tier runs on all).
constexpr size_t kStoreAlign = 4096;  // bytes

// What a store moved, for metrics and the benchmark.
struct StoreStats {
    uint64_t bytes_read = 0;
    uint64_t bytes_written = 0;
    double wait_s = 0;  // seconds callers spent blocked in wait()
};

class Store {
  public:
    using Ticket = uint64_t;

    virtual ~Store() = default;
    // "cpu" or "nvme", as offload_*.device names the tier.
    virtual const char* tier() const = 0;
    // The store's size in bytes, fixed at creation; ranges lie within [0, capacity()).
    virtual uint64_t capacity() const = 0;
    // Starts copying `bytes` bytes at `offset` into dst (read) or from src (write). The buffer must
    // stay untouched until wait() on the ticket returns. Offsets, sizes and addresses: multiples
    // of kStoreAlign. Requests may complete in any order; a read issued after a write to an
    // overlapping range must not be issued before that write's wait() returned.
    virtual Ticket read(uint64_t offset, void* dst, size_t bytes) = 0;
    virtual Ticket write(uint64_t offset, const void* src, size_t bytes) = 0;
    // Blocks until the request finished; throws zt::Error (kInput, naming the file) when it failed.
    // Each ticket is waited for exactly once.
    virtual void wait(Ticket t) = 0;
    virtual StoreStats stats() const = 0;
    // The store's bytes at `offset` as memory the caller may read and write in place, or nullptr
    // where the store is not addressable memory (a file).
    virtual void* mapped(uint64_t offset) { (void)offset; return nullptr; }
};

// Host memory for staging buffers and the cpu tier: `bytes` rounded up to kStoreAlign, aligned to
// 2 MiB (transparent huge pages, as checkpoint/direct_io's buffers), zeroed. Freed by
// free_host_buffer. Not from the MemoryPool: it is outside the per-rank budget.
void* alloc_host_buffer(size_t bytes);
void free_host_buffer(void* p);

}  // namespace zt
