#include "runtime/run_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/log.h"

namespace zt {

namespace {

namespace fs = std::filesystem;

std::string host_name() {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
    return buf;
}

std::string read_fd(int fd) {
    std::string s;
    char buf[512];
    for (off_t at = 0;;) {
        const ssize_t n = ::pread(fd, buf, sizeof buf, at);
        if (n <= 0) break;
        s.append(buf, static_cast<size_t>(n));
        at += n;
        if (s.size() > 4096) break;
    }
    return s;
}

// "host H, pid P (since T)" from a lock file's text; the raw text when it is not ours.
std::string holder_text(const std::string& text) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_object() || !j.contains("host") || !j.contains("pid"))
        return text.empty() ? "an unknown holder" : "\"" + text.substr(0, 200) + "\"";
    return str_cat("host ", j["host"].is_string() ? j["host"].get<std::string>() : "?", ", pid ",
                   j["pid"].dump(), j.contains("since") ? " (since " + j.value("since", "") + ")"
                                                        : std::string());
}

std::string now_text() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

[[noreturn]] void held_error(const std::string& dir, const std::string& path, int fd) {
    ZT_FAIL("run directory ", dir, " is in use by another job: ", holder_text(read_fd(fd)),
            " holds ", path, "; wait for that job to end, stop it, or give another --run-dir");
}

void check_is_directory(const std::string& dir) {
    std::error_code ec;
    const fs::file_status st = fs::status(dir, ec);
    ZT_CHECK(!fs::exists(st) || fs::is_directory(st), "--run-dir ", dir,
             ": exists and is not a directory; name a directory (it is created when missing)");
}

}  // namespace

void check_run_dir(const std::string& dir) {
    check_is_directory(dir);
    const std::string path = dir + "/" + kRunDirLockName;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;  // no lock file: free
    const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    if (held) {
        std::string text = read_fd(fd);
        ::close(fd);
        ZT_FAIL("run directory ", dir, " is in use by another job: ", holder_text(text),
                " holds ", path, "; wait for that job to end, stop it, or give another --run-dir");
    }
    ::close(fd);
}

RunDirLock::RunDirLock(const std::string& dir) : dir_(dir), path_(dir + "/" + kRunDirLockName) {
    check_is_directory(dir);
    std::error_code ec;
    created_ = !fs::exists(dir, ec);
    fs::create_directories(dir, ec);
    ZT_CHECK(!ec, "--run-dir ", dir, ": cannot create it: ", ec.message());
    // Note: a holder may remove the file between our open and flock; then we hold the lock of a
    // file no longer in the directory, so check that the path still names what we locked.
    for (int attempt = 0;; ++attempt) {
        fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd_ < 0) {
            const int err = errno;
            release();
            ZT_CHECK(false, "cannot create the run directory's lock ", path_, ": ",
                     std::strerror(err));
        }
        if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
            if (errno == EWOULDBLOCK) {
                const int fd = fd_;
                fd_ = -1;
                created_ = false;  // the holder's directory
                try {
                    held_error(dir_, path_, fd);
                } catch (...) {
                    ::close(fd);
                    throw;
                }
            }
            // A file system without flock: the lock file still names us, unenforced.
            log_warn("run directory ", dir_, ": cannot lock ", path_, " (", std::strerror(errno),
                     "); another job on it would not be refused");
            break;
        }
        struct stat a{}, b{};
        if (::fstat(fd_, &a) == 0 && ::stat(path_.c_str(), &b) == 0 && a.st_ino == b.st_ino &&
            a.st_dev == b.st_dev)
            break;
        ::close(fd_);
        fd_ = -1;
        ZT_ASSERT(attempt < 100, "cannot take the lock ", path_, ": it keeps being replaced");
    }
    const std::string old = read_fd(fd_);
    if (!old.empty())
        log_warn("run directory ", dir_, ": taking over the stale lock of ", holder_text(old),
                 ", which ended without releasing it");
    const std::string text = nlohmann::json{{"host", host_name()},
                                            {"pid", static_cast<int64_t>(::getpid())},
                                            {"since", now_text()}}
                                 .dump() +
                             "\n";
    const bool ok = ::ftruncate(fd_, 0) == 0 &&
                    ::pwrite(fd_, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size());
    if (!ok) {
        const int err = errno;
        release();
        throw Error(ErrorKind::kInternal, __FILE__, __LINE__,
                    str_cat("cannot write the run directory's lock ", path_, ": ",
                            std::strerror(err)));
    }
}

RunDirLock::~RunDirLock() { release(); }

void RunDirLock::release() noexcept {
    if (fd_ >= 0) {
        struct stat a{}, b{};
        if (::fstat(fd_, &a) == 0 && ::stat(path_.c_str(), &b) == 0 && a.st_ino == b.st_ino &&
            a.st_dev == b.st_dev)
            ::unlink(path_.c_str());
        ::close(fd_);  // releases the flock
        fd_ = -1;
    }
    if (created_) {
        std::error_code ec;
        fs::remove(dir_, ec);  // only when empty
    }
}

}  // namespace zt
