// The "nvme" tier: a store in one swap file on a fast disk (DeepSpeed's nvme_path), read and
// written at (offset, size) ranges through io_uring and O_DIRECT (offload/aio.h), with the same
// fallbacks as checkpoint I/O: the page cache where the file system refuses O_DIRECT, blocking
// pread/pwrite where io_uring is unavailable. The file is sized in full at construction, so a
// disk too small fails at start, and removed at destruction; a crashed run's file is reclaimed
// by the next start (Note [Swap files] in nvme_store.cpp). Not thread-safe: one caller thread.
#pragma once

#include <string>
#include <unordered_map>

#include "offload/aio.h"
#include "offload/store.h"

namespace zt {

struct NvmeStoreOptions {
    std::string dir;          // an existing, writable directory on the fast disk (nvme_path)
    std::string name;         // which store, in the file name: "optimizer", "params", ...
    uint64_t bytes = 0;       // capacity; rounded up to kStoreAlign
    bool direct = true;       // O_DIRECT (false: through the page cache)
    bool uring = true;        // io_uring (false: one blocking call per chunk)
    int queue_depth = 8;      // chunks in flight (DeepSpeed's aio.queue_depth)
    bool single_submit = false;            // one system call per chunk, not per request
    size_t chunk_bytes = size_t{8} << 20;  // 8 MiB: requests are split into chunks this large
};

class NvmeStore final : public Store {
  public:
    // Throws zt::Error (kInput) naming the path when dir is missing, not a directory, not
    // writable, or short of free space for `bytes`.
    explicit NvmeStore(const NvmeStoreOptions& options);
    ~NvmeStore() override;  // waits for requests in flight, closes and removes the file
    NvmeStore(const NvmeStore&) = delete;
    NvmeStore& operator=(const NvmeStore&) = delete;

    const char* tier() const override { return "nvme"; }
    uint64_t capacity() const override { return bytes_; }
    Ticket read(uint64_t offset, void* dst, size_t bytes) override;
    Ticket write(uint64_t offset, const void* src, size_t bytes) override;
    void wait(Ticket t) override;
    StoreStats stats() const override { return stats_; }

    const std::string& path() const { return path_; }
    bool direct() const { return direct_; }  // O_DIRECT still in effect
    bool uring() const { return queue_.uring(); }

    // Removes the swap files in dir, zerotrain-swap-<pid>-*.bin, whose process is gone and
    // which no live store holds; returns how many. The constructor calls it.
    static int reclaim_stale(const std::string& dir);

  private:
    struct Request {
        unsigned pieces_left = 0;
        std::string error;  // the first failure among its pieces
    };
    struct Piece {
        Ticket ticket;
        AioOp op;
        std::byte* buf;
        size_t bytes;
        uint64_t offset;
        bool direct;  // issued while O_DIRECT was in effect
    };

    Ticket issue(AioOp op, uint64_t offset, std::byte* buf, size_t bytes);
    void reap_one();
    int64_t redo_blocking(const Piece& p);
    void close_and_remove() noexcept;

    std::string path_;
    uint64_t bytes_;
    size_t chunk_;
    bool single_submit_;
    int fd_ = -1;
    bool direct_ = false;
    AioQueue queue_;
    std::unordered_map<Ticket, Request> requests_;
    std::unordered_map<uint64_t, Piece> pieces_;  // by the tag given to the queue
    Ticket next_ticket_ = 1;
    uint64_t next_piece_ = 0;
    StoreStats stats_;
};

// Bytes free to an unprivileged user on the file system holding dir (statvfs).
uint64_t nvme_free_bytes(const std::string& dir);

// The swap file of store `name` of this process: <dir>/zerotrain-swap-<pid>-<name>.bin.
std::string nvme_swap_path(const std::string& dir, const std::string& name);

}  // namespace zt
