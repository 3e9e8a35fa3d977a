#include "runtime/streamed_gather.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

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

}  // namespace zt
