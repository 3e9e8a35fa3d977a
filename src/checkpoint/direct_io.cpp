// Sequential O_DIRECT + io_uring file I/O, on the shared queue of offload/aio.h; see direct_io.h.
//
// Note [Direct I/O]
// A checkpoint is gigabytes written once and not read again by this process, so the page cache
// only costs: buffered writes copy every byte into it, and under dirty-page throttling that copy,
// not the disk, sets the speed (a 1.5 GB shard through 8 MiB buffered writes: 340 MB/s with the
// other core busy, against 2.5 GB/s for the same disk through O_DIRECT with 4 requests in flight
// and 1.6 GB/s with one blocking O_DIRECT write at a time). So shards move through a few aligned
// chunk buffers: the caller's thread copies the next chunk in (taking the CRC-32C on the way)
// while the kernel writes the previous ones, and reads stream the same way, the caller consuming
// chunk k while chunks k+1..k+depth-1 are read. O_DIRECT wants buffer, offset and length aligned:
// the last chunk of a write is padded with zeros to kDirectIoAlign and the file truncated back to
// its size before the fsync (which still makes the size and the device's cache durable). The
// chunk buffers are 2 MiB-aligned and asked to be transparent huge pages: a block-layer request
// carries at most max_segments (254 on this virtio disk) discontiguous pieces of memory, so 4 KiB
// pages cap it near 1 MiB and an 8 MiB transfer is split into eight, while huge pages let it go
// out in the device's largest requests (max_sectors_kb, 4 MiB here). Cold O_DIRECT reads of a
// 744 MB shard, four 8 MiB requests in flight: 1.0-1.2 GB/s from 4 KiB pages, 2.6-3.1 GB/s from
// huge pages. Where the file system refuses O_DIRECT (EINVAL at open or at the first transfer)
// the file continues through the page cache, with writeback started after each chunk (Note
// [Chunked writes]).
#include "checkpoint/direct_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "checkpoint/durable_file.h"
#include "offload/aio.h"
#include "util/crc32c.h"
#include "util/error.h"

namespace zt {

namespace {

static_assert(kDirectIoAlign == kAioAlign);

size_t align_up(size_t n) { return (n + kDirectIoAlign - 1) / kDirectIoAlign * kDirectIoAlign; }

// A fixed set of chunk buffers, each with at most one read or write in flight, on an AioQueue
// (offload/aio.h: io_uring or, without one, a blocking call at submit time).
class ChunkQueue {
  public:
    ChunkQueue(int fd, const std::string& path, const DirectIoOptions& o, bool writing, bool direct)
        : fd_(fd),
          path_(path),
          writing_(writing),
          direct_(direct),
          chunk_(align_up(std::max<size_t>(o.chunk_bytes, 1))),
          slots_(static_cast<size_t>(std::max(o.queue_depth, 1))),
          queue_(static_cast<unsigned>(slots_.size()), o.uring, path) {}
    ~ChunkQueue() {
        for (size_t s = 0; s < slots_.size(); ++s)
            if (slots_[s].busy) try {
                    wait(s);
                } catch (...) {  // the caller is unwinding from an earlier error already
                }
    }
    ChunkQueue(const ChunkQueue&) = delete;
    ChunkQueue& operator=(const ChunkQueue&) = delete;

    size_t slots() const { return slots_.size(); }
    bool busy(size_t s) const { return slots_[s].busy; }
    size_t chunk() const { return chunk_; }
    bool direct() const { return direct_; }
    bool uring() const { return queue_.uring(); }

    std::byte* buffer(size_t s) {
        Slot& sl = slots_[s];
        if (!sl.buf) sl.buf = alloc_aligned_buffer(chunk_, path_);
        return sl.buf.get();
    }

    // Starts moving `len` bytes between slot s's buffer and the file at `offset`; with O_DIRECT,
    // the transfer is rounded up to the alignment (a write's padding must be zeros, a read may
    // stop short at the end of the file).
    void submit(size_t s, uint64_t offset, size_t len) {
        Slot& sl = slots_[s];
        ZT_ASSERT(!sl.busy && len <= chunk_);
        sl = Slot{std::move(sl.buf), true, offset, len, kPending};
        const size_t n = direct_ ? align_up(len) : len;
        queue_.prepare(fd_, op(), buffer(s), n, offset, s, writing_ && !direct_);
        queue_.submit();
    }

    // Waits for slot s's transfer and returns how many bytes it moved (at least its length for a
    // write; a read may be shorter only at the end of the file).
    size_t wait(size_t s) {
        Slot& sl = slots_[s];
        ZT_ASSERT(sl.busy);
        while (sl.result == kPending) {
            const AioCompletion c = queue_.complete();
            slots_[c.tag].result = c.result;
        }
        sl.busy = false;
        int64_t res = sl.result;
        if (res == -EAGAIN || res == -EINTR) res = -EAGAIN;  // redo below, blocking
        if (res == -EINVAL && direct_) {
            // The file system accepted O_DIRECT at open but not this transfer: go on buffered.
            ZT_CHECK(clear_direct(fd_), "cannot turn off O_DIRECT on ", path_, ": ",
                     std::strerror(errno));
            direct_ = false;
            res = -EAGAIN;
        }
        if (res == -EAGAIN) res = blocking(s, sl.offset, direct_ ? align_up(sl.len) : sl.len);
        if (writing_)
            ZT_IO_CHECK(res >= 0, "cannot write ", path_, ": ",
                        std::strerror(static_cast<int>(-res)));
        ZT_CHECK(res >= 0, "cannot read ", path_, ": ", std::strerror(static_cast<int>(-res)));
        if (writing_ && static_cast<size_t>(res) < sl.len)  // a short write: finish it
            res = static_cast<int64_t>(res + complete_write(s, static_cast<size_t>(res)));
        return static_cast<size_t>(res);
    }

  private:
    static constexpr int64_t kPending = INT64_MIN;
    struct Slot {
        AlignedBuffer buf;
        bool busy = false;
        uint64_t offset = 0;
        size_t len = 0;
        int64_t result = kPending;
    };

    AioOp op() const { return writing_ ? AioOp::kWrite : AioOp::kRead; }

    int64_t blocking(size_t s, uint64_t offset, size_t n) {
        return aio_blocking(fd_, op(), buffer(s), n, offset, writing_ && !direct_);
    }

    // The rest of slot s's write after `done` bytes went out, blocking and buffered (a short
    // O_DIRECT write leaves an unaligned remainder); no progress means the disk is full.
    size_t complete_write(size_t s, size_t done) {
        Slot& sl = slots_[s];
        if (direct_ && clear_direct(fd_)) direct_ = false;
        ZT_CHECK(!direct_, "cannot turn off O_DIRECT on ", path_, ": ", std::strerror(errno));
        std::memmove(buffer(s), buffer(s) + done, sl.len - done);
        const int64_t r = blocking(s, sl.offset + done, sl.len - done);
        ZT_IO_CHECK(r > 0 && static_cast<size_t>(r) == sl.len - done, "cannot write ", path_, ": ",
                 std::strerror(r < 0 ? static_cast<int>(-r) : ENOSPC));
        return static_cast<size_t>(r);
    }

    int fd_;
    const std::string& path_;
    bool writing_;
    bool direct_;
    size_t chunk_;
    std::vector<Slot> slots_;
    AioQueue queue_;  // after slots_: destroyed first, so no transfer outlives its buffer
};

}  // namespace

struct DirectFileWriter::Impl {
    std::string path;
    SysFd fd;
    std::unique_ptr<ChunkQueue> queue;
    size_t slot = 0;      // the buffer being filled
    size_t fill = 0;      // bytes in it
    uint64_t offset = 0;  // file offset of its first byte
    WrittenFile out;
    bool finished = false;
    bool started_direct = false;
    bool started_uring = false;

    void flush_slot(size_t len) {
        if (queue->direct()) std::memset(queue->buffer(slot) + len, 0, align_up(len) - len);
        queue->submit(slot, offset, len);
        offset += len;
        slot = (slot + 1) % queue->slots();
        fill = 0;
    }
};

DirectFileWriter::DirectFileWriter(const std::string& path, DirectIoOptions options)
    : impl_(std::make_unique<Impl>()) {
    Impl& m = *impl_;
    m.path = path;
    bool direct = false;
    m.fd.fd =
        open_maybe_direct(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, options.direct, &direct);
    ZT_CHECK(m.fd.fd >= 0, "cannot create ", path, ": ", std::strerror(errno));
    m.queue = std::make_unique<ChunkQueue>(m.fd.fd, m.path, options, true, direct);
    m.started_direct = direct;
    m.started_uring = m.queue->uring();
}

DirectFileWriter::~DirectFileWriter() { impl_->queue.reset(); }  // waits, then SysFd closes

void DirectFileWriter::append(const void* data, size_t bytes) {
    Impl& m = *impl_;
    ZT_ASSERT(!m.finished, "DirectFileWriter: append after finish");
    const auto* p = static_cast<const std::byte*>(data);
    ChunkQueue& q = *m.queue;
    while (bytes > 0) {
        // A buffer still in flight from the previous round of slots is reused only once written.
        if (m.fill == 0 && q.busy(m.slot)) q.wait(m.slot);
        const size_t n = std::min(bytes, q.chunk() - m.fill);
        std::byte* dst = q.buffer(m.slot) + m.fill;
        std::memcpy(dst, p, n);
        m.out.crc32c = crc32c_extend(m.out.crc32c, dst, n);
        m.fill += n;
        m.out.bytes += n;
        p += n;
        bytes -= n;
        if (m.fill == q.chunk()) m.flush_slot(m.fill);
    }
}

WrittenFile DirectFileWriter::finish() {
    Impl& m = *impl_;
    ZT_ASSERT(!m.finished, "DirectFileWriter: finish twice");
    ChunkQueue& q = *m.queue;
    if (m.fill > 0) m.flush_slot(m.fill);
    for (size_t s = 0; s < q.slots(); ++s)
        if (q.busy(s)) q.wait(s);
    m.started_direct = m.started_direct && q.direct();
    // The padding of the last O_DIRECT chunk goes; a no-op when nothing was padded.
    ZT_IO_CHECK(::ftruncate(m.fd.fd, static_cast<off_t>(m.out.bytes)) == 0, "cannot truncate ",
                m.path, ": ", std::strerror(errno));
    ZT_IO_CHECK(::fsync(m.fd.fd) == 0, "cannot fsync ", m.path, ": ", std::strerror(errno));
    m.queue.reset();
    const int fd = m.fd.fd;
    m.fd.fd = -1;
    ZT_IO_CHECK(::close(fd) == 0, "cannot close ", m.path, ": ", std::strerror(errno));
    m.finished = true;
    return m.out;
}

DirectIoReport DirectFileWriter::report() const {
    const bool direct = impl_->started_direct && (!impl_->queue || impl_->queue->direct());
    return {direct, impl_->started_uring};
}

DirectIoReport read_file_sequential(const std::string& path, uint64_t bytes, const ChunkFn& fn,
                                    DirectIoOptions options) {
    bool direct = false;
    SysFd fd{open_maybe_direct(path, O_RDONLY | O_CLOEXEC, options.direct, &direct)};
    ZT_CHECK(fd.fd >= 0, "cannot open ", path, ": ", std::strerror(errno));
    ChunkQueue q(fd.fd, path, options, false, direct);
    const DirectIoReport started{direct, q.uring()};
    const uint64_t chunks = (bytes + q.chunk() - 1) / q.chunk();
    auto length = [&](uint64_t c) {
        return static_cast<size_t>(std::min<uint64_t>(q.chunk(), bytes - c * q.chunk()));
    };
    for (uint64_t c = 0; c < std::min<uint64_t>(chunks, q.slots()); ++c)
        q.submit(static_cast<size_t>(c), c * q.chunk(), length(c));
    for (uint64_t c = 0; c < chunks; ++c) {
        const size_t s = static_cast<size_t>(c % q.slots());
        const size_t got = q.wait(s);
        ZT_CHECK(got >= length(c), path, " holds ", c * q.chunk() + got, " bytes, expected ", bytes,
                 " (truncated?)");
        fn(c * q.chunk(), std::span<const std::byte>(q.buffer(s), length(c)));
        if (c + q.slots() < chunks) q.submit(s, (c + q.slots()) * q.chunk(), length(c + q.slots()));
    }
    return {started.direct && q.direct(), started.uring};
}

}  // namespace zt
