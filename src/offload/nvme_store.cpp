// The swap-file store; see nvme_store.h.
//
// Note [Swap files]
// One file per store and process, <nvme_path>/zerotrain-swap-<pid>-<name>.bin, created with
// O_EXCL (two stores of one process under one name are a bug, not a file to share) and sized in
// full at once with fallocate(2), so that a disk too small fails at start with the bytes needed
// and free, not hours later with ENOSPC in the middle of a step. Not glibc's posix_fallocate: where
// the file system lacks fallocate it emulates it by writing a byte per block, which an O_DIRECT
// descriptor refuses and which takes minutes for a large file; there the file is extended with
// ftruncate instead (sparse: blocks are allocated on first write, after the free-space check).
// The destructor removes the file. A crashed run cannot, so each start first removes the files
// whose pid is not a live process (kill(pid, 0) fails with ESRCH). A pid alone is not proof: in
// another pid namespace sharing the directory (two containers, one disk) the same number may name
// a live run. So a live store also holds a flock on its file, and a file whose pid looks dead is
// removed only when that lock can be taken. A pid reused by an unrelated process keeps its stale
// file until that process ends; the cost is disk space, never a live run's data.
//
// Note [Submission]
// A request is split into chunks of chunk_bytes (8 MiB: large enough to reach the device's
// largest requests, small enough that several are in flight for one large tensor) and at most
// queue_depth chunks are in flight; issuing more first reaps finished ones, whichever request
// they belong to. The chunks of one request go to the kernel in one io_uring_submit when it is
// issued (single_submit: one per chunk, as DeepSpeed's aio key). Not later, at wait(): the tier
// exists to overlap disk transfers with compute, so a request must be moving by the time read()
// or write() returns. Completions arrive in any order; each carries its chunk's tag, the chunk
// names its request, and a request is done when its last chunk is. A chunk that fails is
// recorded against its request and thrown by that request's wait(), not by whichever call
// happened to reap it.
#include "offload/nvme_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <vector>

#include "util/error.h"

namespace zt {

namespace {

namespace fs = std::filesystem;

constexpr const char* kSwapPrefix = "zerotrain-swap-";
constexpr const char* kSwapSuffix = ".bin";
constexpr size_t kMaxChunk = size_t{1} << 30;  // bytes: an io_uring transfer's length is 32-bit

uint64_t align_up(uint64_t n) { return (n + kStoreAlign - 1) / kStoreAlign * kStoreAlign; }

// The pid in zerotrain-swap-<pid>-<name>.bin, or -1 when the name is not a swap file's.
long swap_file_pid(const std::string& file) {
    const std::string prefix = kSwapPrefix, suffix = kSwapSuffix;
    if (file.size() <= prefix.size() + suffix.size() ||
        file.compare(0, prefix.size(), prefix) != 0 ||
        file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0)
        return -1;
    long pid = 0;
    size_t i = prefix.size();
    for (; i < file.size() && file[i] >= '0' && file[i] <= '9'; ++i) {
        pid = pid * 10 + (file[i] - '0');
        if (pid > INT_MAX) return -1;
    }
    if (i == prefix.size() || i >= file.size() || file[i] != '-') return -1;
    return pid;
}

// Whether `path` could be removed: nobody holds its lock (Note [Swap files]).
bool remove_if_unlocked(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const bool unlocked = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    const bool removed = unlocked && ::unlink(path.c_str()) == 0;
    ::close(fd);
    return removed;
}

// Input errors about nvme_path, each naming the directory and the file it was to hold.
void check_swap_dir(const std::string& dir, const std::string& path) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) {
        const int e = errno;
        ZT_FAIL("offload nvme: the swap directory ", dir, " (for ", path, ") ",
                e == ENOENT ? "does not exist" : str_cat("cannot be used: ", std::strerror(e)),
                "; create it or set nvme_path to an existing directory");
    }
    ZT_CHECK(S_ISDIR(st.st_mode), "offload nvme: the swap directory ", dir, " (for ", path,
             ") is not a directory; set nvme_path to a directory on a fast local disk");
    ZT_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, "offload nvme: the swap directory ", dir,
             " (for ", path, ") is not writable: ", std::strerror(errno),
             "; make it writable or set nvme_path to another directory");
}

}  // namespace

uint64_t nvme_free_bytes(const std::string& dir) {
    struct statvfs vfs {};
    ZT_CHECK(::statvfs(dir.c_str(), &vfs) == 0, "offload nvme: cannot query the free space of ",
             dir, ": ", std::strerror(errno));
    return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}

std::string nvme_swap_path(const std::string& dir, const std::string& name) {
    return (fs::path(dir) / (kSwapPrefix + std::to_string(::getpid()) + "-" + name + kSwapSuffix))
        .string();
}

int NvmeStore::reclaim_stale(const std::string& dir) {
    std::vector<std::string> stale;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const long pid = swap_file_pid(it->path().filename().string());
        // pid 0 would ask about our own process group: not a swap file of ours.
        if (pid <= 0) continue;
        if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
            stale.push_back(it->path().string());
    }
    int removed = 0;
    for (const std::string& p : stale) removed += remove_if_unlocked(p) ? 1 : 0;
    return removed;
}

NvmeStore::NvmeStore(const NvmeStoreOptions& o)
    : path_(nvme_swap_path(o.dir, o.name)),
      bytes_(align_up(o.bytes)),
      chunk_(static_cast<size_t>(align_up(std::max<size_t>(o.chunk_bytes, 1)))),
      single_submit_(o.single_submit),
      queue_(static_cast<unsigned>(std::max(o.queue_depth, 1)), o.uring, path_) {
    ZT_CHECK(!o.name.empty() && o.name.find('/') == std::string::npos, "offload nvme: store name '",
             o.name, "' must be non-empty and hold no '/'");
    ZT_CHECK(chunk_ <= kMaxChunk, "offload nvme: chunk_bytes ", o.chunk_bytes, " exceeds ",
             kMaxChunk);
    check_swap_dir(o.dir, path_);
    reclaim_stale(o.dir);
    const uint64_t free_bytes = nvme_free_bytes(o.dir);
    ZT_CHECK(bytes_ <= free_bytes, "offload nvme: the swap file ", path_, " needs ", bytes_,
             " bytes but ", o.dir, " has ", free_bytes,
             " bytes free; free space there, point nvme_path at a larger disk, or offload less");

    bool direct = false;
    const int fd =
        open_maybe_direct(path_, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, o.direct, &direct);
    if (fd < 0) {
        const int e = errno;
        ZT_CHECK(e != EEXIST, "offload nvme: the swap file ", path_,
                 " already exists: two stores of this process named '", o.name,
                 "'; give each store its own name");
        ZT_FAIL("offload nvme: cannot create the swap file ", path_, ": ", std::strerror(e),
                "; make ", o.dir, " writable or set nvme_path to another directory");
    }
    fd_ = fd;
    direct_ = direct;
    try {
        // Marks the file live for reclaim_stale in other pid namespaces (Note [Swap files]).
        ::flock(fd_, LOCK_EX | LOCK_NB);
        if (bytes_ > 0) {
            int e = ::fallocate(fd_, 0, 0, static_cast<off_t>(bytes_)) == 0 ? 0 : errno;
            if (e == EOPNOTSUPP)
                e = ::ftruncate(fd_, static_cast<off_t>(bytes_)) == 0 ? 0 : errno;
            ZT_CHECK(e == 0, "offload nvme: cannot size the swap file ", path_, " to ", bytes_,
                     " bytes: ", std::strerror(e), "; ", nvme_free_bytes(o.dir), " bytes free in ",
                     o.dir);
        }
    } catch (...) {
        close_and_remove();
        throw;
    }
}

NvmeStore::~NvmeStore() {
    // The callers' buffers may be freed once we return: nothing may still be moving into them.
    while (queue_.in_flight() > 0) try {
            queue_.complete();
        } catch (...) {  // the ring itself failed: nothing more will come back
            break;
        }
    close_and_remove();
}

void NvmeStore::close_and_remove() noexcept {
    if (fd_ < 0) return;  // never created: the name may be another store's
    ::unlink(path_.c_str());
    ::close(fd_);
    fd_ = -1;
}

Store::Ticket NvmeStore::read(uint64_t offset, void* dst, size_t bytes) {
    return issue(AioOp::kRead, offset, static_cast<std::byte*>(dst), bytes);
}

Store::Ticket NvmeStore::write(uint64_t offset, const void* src, size_t bytes) {
    // The kernel only reads from src; AioQueue takes one pointer type for both directions.
    return issue(AioOp::kWrite, offset, static_cast<std::byte*>(const_cast<void*>(src)), bytes);
}

Store::Ticket NvmeStore::issue(AioOp op, uint64_t offset, std::byte* buf, size_t bytes) {
    const char* what = op == AioOp::kRead ? "read" : "write";
    ZT_ASSERT(offset % kStoreAlign == 0 && bytes % kStoreAlign == 0 &&
                  reinterpret_cast<uintptr_t>(buf) % kStoreAlign == 0,
              "NvmeStore::", what, ": offset ", offset, ", size ", bytes,
              " or buffer not aligned to ", kStoreAlign);
    ZT_ASSERT(offset <= bytes_ && bytes <= bytes_ - offset, "NvmeStore::", what, ": [", offset,
              ", ", offset + bytes, ") outside the store of ", bytes_, " bytes");
    const Ticket t = next_ticket_++;
    Request& r = requests_[t];  // node-based map: stays valid while reaping (Note [Submission])
    for (size_t done = 0; done < bytes; done += chunk_) {
        const size_t n = std::min(chunk_, bytes - done);
        while (queue_.in_flight() >= queue_.depth()) reap_one();
        const uint64_t tag = next_piece_++;
        pieces_.emplace(tag, Piece{t, op, buf + done, n, offset + done, direct_});
        ++r.pieces_left;
        queue_.prepare(fd_, op, buf + done, n, offset + done, tag);
        if (single_submit_) queue_.submit();
    }
    queue_.submit();
    (op == AioOp::kRead ? stats_.bytes_read : stats_.bytes_written) += bytes;
    return t;
}

int64_t NvmeStore::redo_blocking(const Piece& p) {
    return aio_blocking(fd_, p.op, p.buf, p.bytes, p.offset, false);
}

void NvmeStore::reap_one() {
    const AioCompletion c = queue_.complete();
    const auto it = pieces_.find(c.tag);
    ZT_ASSERT(it != pieces_.end(), "NvmeStore: completion of unknown chunk ", c.tag);
    const Piece p = it->second;
    pieces_.erase(it);
    int64_t res = c.result;
    if (res == -EAGAIN || res == -EINTR) {
        res = redo_blocking(p);
    } else if (res == -EINVAL && p.direct) {
        // Accepted O_DIRECT at open, refused it at a transfer (Note [Direct I/O] in
        // checkpoint/direct_io.cpp): the file goes on through the page cache.
        if (direct_ && clear_direct(fd_)) direct_ = false;
        if (!direct_) res = redo_blocking(p);
    }
    Request& r = requests_.at(p.ticket);
    --r.pieces_left;
    if (!r.error.empty()) return;
    const char* what = p.op == AioOp::kRead ? "read" : "write";
    if (res < 0)
        r.error = str_cat("offload nvme: cannot ", what, " ", p.bytes, " bytes of ", path_,
                          " at offset ", p.offset, ": ", std::strerror(static_cast<int>(-res)));
    else if (static_cast<size_t>(res) != p.bytes)
        r.error = str_cat("offload nvme: short ", what, " of ", path_, " at offset ", p.offset,
                          ": ", res, " of ", p.bytes, " bytes (was the file truncated, or the disk "
                          "full?)");
}

void NvmeStore::wait(Ticket t) {
    const auto it = requests_.find(t);
    ZT_ASSERT(it != requests_.end(), "NvmeStore::wait: unknown ticket ", t,
              " (never issued, or waited for already)");
    const auto start = std::chrono::steady_clock::now();
    while (it->second.pieces_left > 0) reap_one();
    const auto end = std::chrono::steady_clock::now();
    stats_.wait_s += std::chrono::duration<double>(end - start).count();
    const std::string error = std::move(it->second.error);
    requests_.erase(it);
    ZT_CHECK(error.empty(), error);
}

}  // namespace zt
