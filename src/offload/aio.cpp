// O_DIRECT, aligned buffers and the io_uring queue; see aio.h.
#include "offload/aio.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "util/error.h"

namespace zt {

int open_maybe_direct(const std::string& path, int flags, bool direct, bool* got_direct) {
    *got_direct = false;
    if (direct) {
        const int fd = ::open(path.c_str(), flags | O_DIRECT, 0644);
        if (fd >= 0) {
            *got_direct = true;
            return fd;
        }
        if (errno != EINVAL) return -1;  // a real error (ENOENT, EACCES, ...): report it
    }
    return ::open(path.c_str(), flags, 0644);
}

bool clear_direct(int fd) {
    const int flags = ::fcntl(fd, F_GETFL);
    return flags >= 0 && ::fcntl(fd, F_SETFL, flags & ~O_DIRECT) == 0;
}

void FreeAligned::operator()(std::byte* p) const { std::free(p); }

AlignedBuffer alloc_aligned_buffer(size_t bytes, const std::string& what) {
    const size_t n = (std::max<size_t>(bytes, 1) + kAioAlign - 1) / kAioAlign * kAioAlign;
    const size_t align = n >= kAioHugePage ? kAioHugePage : kAioAlign;
    void* p = nullptr;
    ZT_CHECK(::posix_memalign(&p, align, n) == 0, "cannot allocate a ", n, "-byte I/O buffer for ",
             what);
    if (align == kAioHugePage) ::madvise(p, n, MADV_HUGEPAGE);  // a hint; may fail
    return AlignedBuffer(static_cast<std::byte*>(p));
}

int64_t aio_blocking(int fd, AioOp op, std::byte* buf, size_t n, uint64_t offset,
                     bool start_writeback) {
    const bool writing = op == AioOp::kWrite;
    size_t done = 0;
    while (done < n) {
        std::byte* p = buf + done;
        const off_t at = static_cast<off_t>(offset + done);
        const ssize_t r = writing ? ::pwrite(fd, p, n - done, at) : ::pread(fd, p, n - done, at);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return done > 0 ? static_cast<int64_t>(done) : -errno;
        if (r == 0) break;  // end of file (read); no progress (write): the caller reports
        if (writing && start_writeback) ::sync_file_range(fd, at, r, SYNC_FILE_RANGE_WRITE);
        done += static_cast<size_t>(r);
    }
    return static_cast<int64_t>(done);
}

AioQueue::AioQueue(unsigned depth, bool uring, std::string what)
    : depth_(std::max(depth, 1u)), what_(std::move(what)) {
    if (!uring) return;
    // Submission ring of depth_ entries, completion ring of twice that: in_flight_ <= depth_
    // keeps both from overflowing.
    auto ring = std::make_unique<io_uring>();
    if (io_uring_queue_init(depth_, ring.get(), 0) == 0) ring_ = std::move(ring);
}

AioQueue::~AioQueue() {
    while (in_flight_ > 0) try {
            complete();
        } catch (...) {  // the ring itself failed: nothing more will come back
            break;
        }
    if (ring_) io_uring_queue_exit(ring_.get());
}

void AioQueue::prepare(int fd, AioOp op, std::byte* buf, size_t n, uint64_t offset, uint64_t tag,
                       bool start_writeback) {
    ZT_ASSERT(in_flight_ < depth_, "AioQueue: ", in_flight_, " of ", depth_, " in flight");
    ++in_flight_;
    if (!ring_) {
        finished_.push_back({tag, aio_blocking(fd, op, buf, n, offset, start_writeback)});
        return;
    }
    io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
    ZT_ASSERT(sqe != nullptr, "io_uring: no free submission entry");  // in flight <= depth
    if (op == AioOp::kWrite)
        io_uring_prep_write(sqe, fd, buf, static_cast<unsigned>(n), offset);
    else
        io_uring_prep_read(sqe, fd, buf, static_cast<unsigned>(n), offset);
    io_uring_sqe_set_data64(sqe, tag);
    ++prepared_;
}

void AioQueue::submit() {
    if (!ring_ || prepared_ == 0) return;
    const int r = io_uring_submit(ring_.get());
    ZT_CHECK(r >= 0, "io_uring submit for ", what_, ": ", std::strerror(-r));
    prepared_ = 0;
}

AioCompletion AioQueue::complete() {
    ZT_ASSERT(in_flight_ > 0, "AioQueue::complete with nothing in flight");
    if (!ring_) {
        const AioCompletion c = finished_.front();
        finished_.pop_front();
        --in_flight_;
        return c;
    }
    submit();
    io_uring_cqe* cqe = nullptr;
    int r = 0;
    while ((r = io_uring_wait_cqe(ring_.get(), &cqe)) == -EINTR) {
    }
    ZT_CHECK(r == 0, "io_uring wait for ", what_, ": ", std::strerror(-r));
    const AioCompletion c{io_uring_cqe_get_data64(cqe), cqe->res};
    io_uring_cqe_seen(ring_.get(), cqe);
    --in_flight_;
    return c;
}

}  // namespace zt
