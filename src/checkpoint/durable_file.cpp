#include "checkpoint/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "util/error.h"

namespace zt {

SysFd::~SysFd() {
    if (fd >= 0) ::close(fd);
}

// Note [Chunked writes]: one write(2) of hundreds of megabytes dirties them all before the kernel
// starts writing back, and the copy into the page cache then crawls under dirty-page throttling
// (perf: copy_folio_from_iter_atomic ~35% of a run with sync checkpoints, ~380 MB/s against the
// disk's 2.2 GB/s). Writing in pieces and starting writeback of each one (sync_file_range) keeps
// the dirty set small and the disk busy while the next piece is copied.
constexpr size_t kWriteChunk = size_t{8} << 20;

void write_all(int fd, const void* data, size_t bytes, const std::string& path) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
        const off_t at = ::lseek(fd, 0, SEEK_CUR);
        const ssize_t w = ::write(fd, p, std::min(bytes, kWriteChunk));
        if (w > 0 && at >= 0) ::sync_file_range(fd, at, w, SYNC_FILE_RANGE_WRITE);
        if (w < 0 && errno == EINTR) continue;
        ZT_IO_CHECK(w > 0, "cannot write ", path, ": ", std::strerror(w < 0 ? errno : ENOSPC));
        p += w;
        bytes -= static_cast<size_t>(w);
    }
}

void fsync_dir(const std::string& dir) {
    SysFd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
    ZT_CHECK(d.fd >= 0, "cannot open directory ", dir, ": ", std::strerror(errno));
    // Some file systems cannot sync a directory (EINVAL); the rename is then as durable as it gets.
    ZT_IO_CHECK(::fsync(d.fd) == 0 || errno == EINVAL, "cannot fsync ", dir, ": ",
             std::strerror(errno));
}

void fsync_parent_dir(const std::string& path) {
    std::string dir = std::filesystem::path(path).parent_path().string();
    fsync_dir(dir.empty() ? "." : dir);
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
    const std::string tmp = path + ".tmp";
    SysFd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    ZT_CHECK(f.fd >= 0, "cannot create ", tmp, ": ", std::strerror(errno));
    try {
        write_all(f.fd, bytes.data(), bytes.size(), tmp);
        ZT_IO_CHECK(::fsync(f.fd) == 0, "cannot fsync ", tmp, ": ", std::strerror(errno));
        const int fd = f.fd;
        f.fd = -1;
        ZT_IO_CHECK(::close(fd) == 0, "cannot close ", tmp, ": ", std::strerror(errno));
        rename_durable(tmp, path);
    } catch (...) {
        ::unlink(tmp.c_str());
        throw;
    }
}

void rename_durable(const std::string& from, const std::string& to) {
    ZT_CHECK(::rename(from.c_str(), to.c_str()) == 0, "cannot rename ", from, " to ", to, ": ",
             std::strerror(errno));
    fsync_parent_dir(to);
}

}  // namespace zt
