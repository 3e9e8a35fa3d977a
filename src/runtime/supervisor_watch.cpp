#include "runtime/supervisor_watch.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "util/log.h"

namespace zt {

namespace {

std::string exe_of(pid_t pid) {
    std::error_code ec;
    return std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec).string();
}

[[noreturn]] void end_rank(pid_t pid) {
    log_message(LogLevel::kError, str_cat("the supervisor (zerotrain launch, pid ", pid,
                                          ") is gone; ending this rank rather than training "
                                          "unsupervised"));
    std::_Exit(1);
}

}  // namespace

void end_with_supervisor() {
    const char* pid_text = std::getenv(kSupervisorPidEnv);
    const char* host = std::getenv(kSupervisorHostEnv);
    if (!pid_text || !host) return;
    char me[256] = {};
    if (::gethostname(me, sizeof me - 1) != 0 || std::string(me) != host) return;
    const pid_t pid = static_cast<pid_t>(std::atol(pid_text));
    if (pid <= 1) return;
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0) {
        if (errno == ESRCH) end_rank(pid);
        log_warn("cannot watch the supervisor (pid ", pid, "): pidfd_open failed");
        return;
    }
    // The supervisor runs this same binary: another program under that pid is a reused pid.
    const std::string theirs = exe_of(pid), mine = exe_of(::getpid());
    if (!theirs.empty() && !mine.empty() && theirs != mine) end_rank(pid);
    std::thread([fd, pid] {
        for (;;) {
            pollfd p{fd, POLLIN, 0};
            const int r = ::poll(&p, 1, -1);
            if (r > 0) end_rank(pid);
            if (r < 0 && errno != EINTR) return;
        }
    }).detach();
}

}  // namespace zt
