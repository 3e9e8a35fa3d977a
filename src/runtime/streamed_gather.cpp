#include "runtime/streamed_gather.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "checkpoint/durable_file.h"

namespace zt {

MappedScratch::MappedScratch(const std::string& near, size_t bytes) : bytes_(bytes) {
    const std::string path = near + ".scratch";
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ZT_IO_CHECK(fd >= 0, "export: cannot create the scratch file ", path, ": ",
                std::strerror(errno));
    ::unlink(path.c_str());
    const bool sized = ::ftruncate(fd, static_cast<off_t>(bytes)) == 0;
    const int err = errno;
    if (sized && bytes > 0)
        data_ = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int map_err = errno;
    ::close(fd);
    ZT_IO_CHECK(sized, "export: cannot size the scratch file ", path, " to ", bytes,
                " bytes: ", std::strerror(err));
    ZT_IO_CHECK(data_ != MAP_FAILED, "export: cannot map the scratch file ", path, ": ",
                std::strerror(map_err));
}

MappedScratch::~MappedScratch() {
    if (data_ && data_ != MAP_FAILED) ::munmap(data_, bytes_);
}

std::unique_ptr<MappedScratch> gather_streamed(SparseParams& sp, size_t i, const std::string& path,
                                               bool root) {
    const Shape shape = sp.shape(i);
    const int64_t rows = shape[0], cols = std::max<int64_t>(shape[1], 1);
    std::unique_ptr<MappedScratch> out;
    if (root) out = std::make_unique<MappedScratch>(path, static_cast<size_t>(rows * cols) * 4);
    const int64_t run = std::max<int64_t>((int64_t{64} << 20) / (cols * 4), 1);
    for (int64_t r = 0; r < rows; r += run)
        sp.gather_rows(i, r, std::min(run, rows - r), 0, root ? out->data() + r * cols : nullptr);
    return out;
}

// Note [Pulled rows]
// The safetensors writer on rank 0 asks for a tensor's bytes in pieces, in its own order; the
// other ranks cannot know that order, so rank 0 leads: before each run of rows it sends every other
// rank the request (tensor, first row, rows; three i64 on kPullTag), and all of them then run the
// collective gather_rows for it. A request with tensor -1 ends the others' serve(). Rank 0 sends it
// when the file is written or its writing failed (the destructor), so no rank waits forever.
namespace {
constexpr int kPullTag = 0x5f00;
}  // namespace

void RowServer::request(int64_t tensor, int64_t r0, int64_t n) {
    const int64_t q[3] = {tensor, r0, n};
    for (int r = 1; comm_ && r < comm_->size(); ++r)
        comm_->send(q, 3, CommType::kI64, r, kPullTag)->wait();
}

std::function<void(int64_t, int64_t, float*)> RowServer::reader(size_t i) {
    return [this, i](int64_t first, int64_t count, float* dst) {
        const int64_t cols = std::max<int64_t>(sp_.shape(i)[1], 1);
        const int64_t r0 = first / cols, r1 = (first + count + cols - 1) / cols;
        const bool whole_rows = first % cols == 0 && count % cols == 0;
        std::vector<float> rows(whole_rows ? 0 : static_cast<size_t>((r1 - r0) * cols));
        request(static_cast<int64_t>(i), r0, r1 - r0);
        sp_.gather_rows(i, r0, r1 - r0, 0, whole_rows ? dst : rows.data());
        if (!whole_rows) std::copy_n(rows.data() + (first - r0 * cols), count, dst);
    };
}

void RowServer::serve() {
    for (;;) {
        int64_t q[3] = {-1, 0, 0};
        comm_->recv(q, 3, CommType::kI64, 0, kPullTag)->wait();
        if (q[0] < 0) return;
        sp_.gather_rows(static_cast<size_t>(q[0]), q[1], q[2], 0, nullptr);
    }
}

void RowServer::stop() {
    if (stopped_) return;
    stopped_ = true;
    request(-1, 0, 0);
}

RowServer::~RowServer() {
    try {
        stop();
    } catch (...) {  // the failure that got here is reported where it happened
    }
}

}  // namespace zt
