// Low-level asynchronous file I/O, shared by the nvme tier (offload/nvme_store.h) and checkpoint
// shards (checkpoint/direct_io.h), which sits above this layer: opening with O_DIRECT where the
// file system takes it, aligned buffers, one blocking transfer, and a queue of transfers on
// io_uring that falls back to blocking pread/pwrite where io_uring is unavailable (Note [Direct
// I/O] in checkpoint/direct_io.cpp says why). Leaves out policy: what a failed, refused or short
// transfer means is the caller's to decide. Not thread-safe: one queue, one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

struct io_uring;  // liburing.h stays out of public headers

namespace zt {

constexpr size_t kAioAlign = 4096;                // bytes: O_DIRECT's buffers, offsets, lengths
constexpr size_t kAioHugePage = size_t{2} << 20;  // bytes: x86-64's transparent huge page

// Opens path with O_DIRECT when `direct` is asked and the file system allows it (EINVAL from open
// means it does not), else without; *got_direct says which. Returns the descriptor, or -1 with
// errno set for a real error (ENOENT, EACCES, ...). New files get mode 0644.
int open_maybe_direct(const std::string& path, int flags, bool direct, bool* got_direct);
// Clears O_DIRECT on an open file whose file system accepted it at open but refuses a transfer;
// false with errno set when fcntl fails.
bool clear_direct(int fd);

struct FreeAligned {
    void operator()(std::byte* p) const;
};
using AlignedBuffer = std::unique_ptr<std::byte, FreeAligned>;
// `bytes` rounded up to kAioAlign, not zeroed: aligned to 2 MiB and advised as huge pages when it
// holds one (Note [Direct I/O], segments), else to kAioAlign. `what` names the use in the error.
AlignedBuffer alloc_aligned_buffer(size_t bytes, const std::string& what);

enum class AioOp { kRead, kWrite };

// pread/pwrite of n bytes, retried on EINTR and continued after a short transfer until n bytes
// moved, end of file (reads), no progress (writes) or an error. Returns the bytes moved, or -errno
// when an error came before any byte moved. start_writeback: sync_file_range after each buffered
// write, so dirty pages do not pile up (Note [Chunked writes] in checkpoint/durable_file.cpp).
int64_t aio_blocking(int fd, AioOp op, std::byte* buf, size_t n, uint64_t offset,
                     bool start_writeback);

// A finished transfer: the caller's tag and the bytes moved, or -errno.
struct AioCompletion {
    uint64_t tag = 0;
    int64_t result = 0;
};

// Up to depth() transfers in flight on one io_uring, each named by a caller's tag; completions come
// back in any order. Without io_uring (asked for none, or io_uring_queue_init failed: an old
// kernel, a seccomp filter, a locked-memory limit) each transfer happens, blocking, when prepared,
// and its completion waits in a list: callers see the same interface either way.
class AioQueue {
  public:
    // `what` names the queue's file in errors.
    AioQueue(unsigned depth, bool uring, std::string what);
    ~AioQueue();  // reaps what is still in flight, dropping the results
    AioQueue(const AioQueue&) = delete;
    AioQueue& operator=(const AioQueue&) = delete;

    bool uring() const { return ring_ != nullptr; }
    unsigned depth() const { return depth_; }
    // Prepared, submitted and finished but not yet returned by complete().
    unsigned in_flight() const { return in_flight_; }

    // Queues a transfer of n bytes between buf and the file at offset; requires in_flight() <
    // depth(). On io_uring it goes out at the next submit() or complete(); without, it happens
    // now (start_writeback as for aio_blocking). buf must stay untouched until its completion.
    void prepare(int fd, AioOp op, std::byte* buf, size_t n, uint64_t offset, uint64_t tag,
                 bool start_writeback = false);
    // Hands prepared transfers to the kernel in one system call; a no-op when none are prepared.
    void submit();
    // Submits what is prepared, then waits for one transfer to finish; requires in_flight() > 0.
    AioCompletion complete();

  private:
    unsigned depth_;
    std::string what_;
    std::unique_ptr<io_uring> ring_;  // null: the blocking fallback
    unsigned in_flight_ = 0;
    unsigned prepared_ = 0;                 // io_uring: prepared, not yet submitted
    std::deque<AioCompletion> finished_;    // the fallback: done at prepare, not yet returned
};

}  // namespace zt
