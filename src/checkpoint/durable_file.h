// Durable file operations for checkpoints and exported weights: a file becomes visible under its
// name only when complete (written to a temporary name, fsynced, renamed, the directory fsynced).
// Errors are zt::Error naming the path and the system's reason.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "util/error.h"

// A write, fsync or close that fails (a full disk, a quota, an I/O error) is the environment's
// failure, not bad input: zt::Error of kind kInternal (exit code 1), so that a supervisor may
// retry. Opening a path the user named stays an input error (ZT_CHECK).
#define ZT_IO_CHECK(cond, ...)                                                           \
    do {                                                                                 \
        if (!(cond))                                                                     \
            throw ::zt::Error(::zt::ErrorKind::kInternal, __FILE__, __LINE__,            \
                              ::zt::str_cat(__VA_ARGS__));                               \
    } while (0)

namespace zt {

// A file descriptor closed on destruction.
struct SysFd {
    int fd = -1;
    SysFd() = default;
    explicit SysFd(int f) : fd(f) {}
    SysFd(const SysFd&) = delete;
    SysFd& operator=(const SysFd&) = delete;
    ~SysFd();
};

// write(2) until done; EINTR retried.
void write_all(int fd, const void* data, size_t bytes, const std::string& path);
void fsync_dir(const std::string& dir);
void fsync_parent_dir(const std::string& path);
// path.tmp, fsync, rename over path, fsync of the directory.
void write_file_atomic(const std::string& path, std::string_view bytes);
// rename(2) then fsync of the destination's directory.
void rename_durable(const std::string& from, const std::string& to);

}  // namespace zt
