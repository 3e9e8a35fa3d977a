#include "util/temp_files.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>

#include "util/error.h"

// Note [Orphaned temporary files]
// A killed run cannot remove its temporary files, and a generated click log can be gigabytes.
// Each name carries its process id, so the next run on the machine removes the entries of
// processes that are gone (kill(pid, 0) says ESRCH, or the process is a zombie) before it makes
// its own. A process that is still running, whoever's it is, keeps its files; a pid reused by an
// unrelated process keeps a dead run's files until that process ends too. The temporary
// directory is per host, so a pid there names a process of this host (a container sharing /tmp
// across pid namespaces would keep more than it must, never remove a live run's).

namespace zt {

namespace {

namespace fs = std::filesystem;

constexpr const char* kPrefix = "zerotrain-";

// The pid in zerotrain-<pid>-<n>-<what>, or -1 when the name is not of that form.
long temp_file_pid(const std::string& name) {
    const std::string prefix = kPrefix;
    if (name.compare(0, prefix.size(), prefix) != 0) return -1;
    size_t i = prefix.size();
    long pid = 0;
    for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) {
        pid = pid * 10 + (name[i] - '0');
        if (pid > INT_MAX) return -1;
    }
    if (i == prefix.size() || i >= name.size() || name[i] != '-') return -1;
    size_t j = ++i;
    for (; j < name.size() && name[j] >= '0' && name[j] <= '9'; ++j) {
    }
    if (j == i || j + 1 >= name.size() || name[j] != '-') return -1;
    return pid;
}

// A killed process whose parent has not reaped it yet (a zombie, state Z in /proc/PID/stat:
// common in containers whose init does not reap) runs no more either.
bool process_gone(long pid) {
    if (pid <= 0) return false;
    if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
    std::ifstream stat(str_cat("/proc/", pid, "/stat"));
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t paren = text.rfind(')');  // the name may hold spaces and parentheses
    return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z';
}

}  // namespace

int remove_orphaned_temp_files(const std::string& dir) {
    int removed = 0;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const long pid = temp_file_pid(it->path().filename().string());
        if (pid < 0 || !process_gone(pid)) continue;
        std::error_code rm;
        if (fs::remove_all(it->path(), rm) > 0 && !rm) ++removed;
    }
    return removed;
}

std::string make_temp_path(const std::string& what) {
    static std::atomic<int> counter{0};
    static std::once_flag swept;
    const fs::path dir = fs::temp_directory_path();
    std::call_once(swept, [&] { remove_orphaned_temp_files(dir.string()); });
    return (dir / str_cat(kPrefix, ::getpid(), "-", counter++, "-", what)).string();
}

}  // namespace zt
