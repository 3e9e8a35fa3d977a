#include "cli/launch_process.h"

#include <dirent.h>
#include <sys/prctl.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "util/signal_handler.h"

namespace zt::cli {

namespace {

// Stop signals received (SIGTERM, SIGINT) and the last one; the handler only counts.
volatile std::sig_atomic_t g_stop_signals = 0;
volatile std::sig_atomic_t g_last_stop_signal = 0;

extern "C" void on_supervisor_signal(int sig) {
    g_stop_signals = g_stop_signals + 1;
    g_last_stop_signal = sig;
}

constexpr int kPollMs = 50;              // how often the watcher looks at the job
constexpr double kDrainSeconds = 3.0;    // reading the job's last output after it exited
constexpr double kReapSeconds = 10.0;    // waiting for what is left of it to die

// pid -> parent pid of every process (/proc/PID/stat; the command name may hold spaces).
std::map<pid_t, pid_t> parent_map() {
    std::map<pid_t, pid_t> out;
    DIR* d = ::opendir("/proc");
    if (!d) return out;
    while (dirent* e = ::readdir(d)) {
        char* end = nullptr;
        const long pid = std::strtol(e->d_name, &end, 10);
        if (!end || *end != '\0' || pid <= 0) continue;
        std::ifstream f(std::string("/proc/") + e->d_name + "/stat");
        std::string s;
        std::getline(f, s);
        const size_t close = s.rfind(')');
        if (close == std::string::npos) continue;
        std::istringstream rest(s.substr(close + 1));
        char state = 0;
        long ppid = 0;
        if (rest >> state >> ppid) out[static_cast<pid_t>(pid)] = static_cast<pid_t>(ppid);
    }
    ::closedir(d);
    return out;
}

// Every process below this one (we are a child subreaper: orphaned ranks stay below).
std::vector<pid_t> descendants() {
    std::multimap<pid_t, pid_t> children;
    for (auto [pid, ppid] : parent_map()) children.emplace(ppid, pid);
    std::vector<pid_t> out, todo{::getpid()};
    while (!todo.empty()) {
        const pid_t p = todo.back();
        todo.pop_back();
        auto [b, e] = children.equal_range(p);
        for (auto it = b; it != e; ++it) {
            out.push_back(it->second);
            todo.push_back(it->second);
        }
    }
    return out;
}

std::string exe_of(pid_t pid) {
    std::error_code ec;
    return std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec).string();
}

// A stop signal for the job. mpirun would answer SIGTERM by killing the ranks a second later,
// too soon for their checkpoint; so the ranks this machine runs (the processes below us running
// our binary) get it directly, and mpirun sees them exit. srun passes signals on itself.
void forward_stop(const LauncherSpec& spec, pid_t launcher, int sig) {
    int sent = 0;
    if (!spec.srun)
        for (pid_t p : descendants())
            if (p != launcher && exe_of(p) == spec.exe && ::kill(p, sig) == 0) ++sent;
    if (sent == 0) ::kill(launcher, sig);
    log_line("passed signal ", sig, " on to the job",
             sent > 0 ? str_cat(" (", sent, " ranks)") : "");
}

// SIGKILL to everything left of the job, then reaps it.
void end_leftovers() {
    const Clock::time_point until =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(kReapSeconds));
    for (;;) {
        const std::vector<pid_t> left = descendants();
        for (pid_t p : left) ::kill(p, SIGKILL);
        int st = 0;
        while (::waitpid(-1, &st, WNOHANG) > 0) {
        }
        if (left.empty() || Clock::now() > until) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

std::vector<std::string> launcher_command(const LauncherSpec& spec,
                                          const std::vector<std::string>& train) {
    std::vector<std::string> cmd;
    if (spec.srun) {
        cmd = {"srun", "-n", std::to_string(spec.ranks), "--kill-on-bad-exit=1"};
    } else {
        cmd = {"mpirun", "-np", std::to_string(spec.ranks)};
        if (spec.ranks > static_cast<int>(std::thread::hardware_concurrency()))
            cmd.push_back("--oversubscribe");
        for (const char* var :
             {"ZT_LAUNCH_ATTEMPT", "ZT_FAULT", "ZT_SUPERVISOR_PID", "ZT_SUPERVISOR_HOST"})
            if (std::getenv(var)) cmd.insert(cmd.end(), {"-x", var});
    }
    cmd.insert(cmd.end(), spec.extra.begin(), spec.extra.end());
    cmd.push_back(spec.exe);
    cmd.insert(cmd.end(), train.begin(), train.end());
    return cmd;
}

// Starts cmd in its own process group, stdin from /dev/null (a launcher outside the terminal's
// foreground group that read the terminal would be stopped), stderr into a pipe; returns the pid.
pid_t spawn(const std::vector<std::string>& cmd, int* stderr_fd) {
    int fds[2];
    ZT_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "launch: pipe: ", std::strerror(errno));
    std::vector<char*> argv;
    for (const std::string& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    ZT_CHECK(pid >= 0, "launch: fork: ", std::strerror(errno));
    if (pid == 0) {
        // The launcher dies with the supervisor (its ranks watch the supervisor themselves).
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) std::_Exit(127);
        ::setpgid(0, 0);
        const int null = ::open("/dev/null", O_RDONLY);
        if (null >= 0) ::dup2(null, STDIN_FILENO);
        ::dup2(fds[1], STDERR_FILENO);
        ::signal(SIGTERM, SIG_DFL);
        ::signal(SIGINT, SIG_DFL);
        ::execvp(argv[0], argv.data());
        std::fprintf(stderr, "zerotrain launch: cannot run %s: %s\n", argv[0],
                     std::strerror(errno));
        std::_Exit(127);
    }
    ::setpgid(pid, pid);  // also here: no race with the child's own call
    ::close(fds[1]);
    *stderr_fd = fds[0];
    return pid;
}

// Reads what the launcher says about a failed rank from one line of its stderr.
void note_launcher_line(const std::string& line, Outcome& o) {
    static const std::regex kSignal(
        R"(process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)( \(([^)]*)\))?)");
    static const std::regex kExitName(R"(Process name: \[\[\d+,\d+\],(\d+)\])");
    static const std::regex kExitCode(R"(Exit code:\s+(\d+))");
    static const std::regex kAbort(R"(zerotrain: aborting the job: (.*))");
    static const std::regex kSrun(R"(srun: error: (\S+): tasks? (\d+)[^:]*: (.*))");
    static const std::regex kFailed(R"(Primary job +terminated normally, but|)"
                                    R"(exited with non-zero status|MPI_ABORT was invoked|)"
                                    R"(srun: error:)");
    std::smatch m;
    if (!o.failure_seen && std::regex_search(line, kFailed)) o.failure_seen = Clock::now();
    if (std::regex_search(line, m, kSignal)) {
        o.failed_rank = std::stoi(m[1]);
        o.launcher_note = str_cat("rank ", m[1].str(), " on ", m[2].str(), " exited on signal ",
                                  m[3].str(), m[5].matched ? " (" + m[5].str() + ")" : "");
    } else if (std::regex_search(line, m, kExitName)) {
        o.failed_rank = std::stoi(m[1]);
    } else if (std::regex_search(line, m, kExitCode) && o.failed_rank >= 0 &&
               o.launcher_note.empty()) {
        o.launcher_note = str_cat("rank ", o.failed_rank, " exited with code ", m[1].str());
    } else if (std::regex_search(line, m, kAbort) && o.launcher_note.empty()) {
        o.launcher_note = m[1].str();
    } else if (std::regex_search(line, m, kSrun) && o.launcher_note.empty()) {
        o.failed_rank = std::stoi(m[2]);
        o.launcher_note = str_cat("rank ", m[2].str(), " on ", m[1].str(), ": ", m[3].str());
    }
}

// Passes the job's stderr through, line by line noting what the launcher says.
class StderrRelay {
public:
    explicit StderrRelay(int fd) : fd_(fd) {}
    ~StderrRelay() {
        if (fd_ >= 0) ::close(fd_);
    }
    StderrRelay(const StderrRelay&) = delete;
    StderrRelay& operator=(const StderrRelay&) = delete;
    bool open() const { return fd_ >= 0; }
    // Waits up to timeout_ms for output and relays it.
    void pump(int timeout_ms, Outcome& o) {
        if (fd_ < 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
            return;
        }
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, timeout_ms) <= 0) return;
        char buf[4096];
        const ssize_t n = ::read(fd_, buf, sizeof buf);
        if (n < 0 && errno == EINTR) return;
        if (n <= 0) {
            ::close(fd_);
            fd_ = -1;
            if (!line_.empty()) note_launcher_line(line_, o);
            return;
        }
        [[maybe_unused]] const ssize_t w = ::write(STDERR_FILENO, buf, static_cast<size_t>(n));
        line_.append(buf, static_cast<size_t>(n));
        for (size_t nl; (nl = line_.find('\n')) != std::string::npos; line_.erase(0, nl + 1))
            note_launcher_line(line_.substr(0, nl), o);
    }

private:
    int fd_;
    std::string line_;
};

}  // namespace

void log_line_text(const std::string& s) {
    std::fprintf(stderr, "zerotrain launch: %s\n", s.c_str());
    std::fflush(stderr);
}

std::vector<std::string> split_words(const std::string& s) {
    std::istringstream in(s);
    std::vector<std::string> out;
    for (std::string w; in >> w;) out.push_back(w);
    return out;
}

std::string self_executable() {
    std::error_code ec;
    const std::string p = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    ZT_CHECK(!ec, "launch: cannot resolve /proc/self/exe: ", ec.message());
    return p;
}

void install_supervisor_signals() {
    // Flags 0, no SA_RESTART: the watcher's poll returns at once.
    set_signal_handler(SIGTERM, on_supervisor_signal, 0);
    set_signal_handler(SIGINT, on_supervisor_signal, 0);
}

std::optional<int64_t> MetricsWatch::scan() {
    struct stat st{};
    if (::stat(path_.c_str(), &st) != 0) return std::nullopt;
    const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    if (st.st_size == size_ && mtime == mtime_ns_) return std::nullopt;
    std::ifstream f(path_);
    std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    size_ = static_cast<int64_t>(all.size());  // what was read; a change after it shows later
    mtime_ns_ = mtime;
    std::optional<int64_t> first;
    for (size_t b = 0, e; (e = all.find('\n', b)) != std::string::npos; b = e + 1) {
        const std::string line = all.substr(b, e - b);
        const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        if (!j.is_object()) continue;
        if (j.contains("error") && j["error"].is_string()) {
            if (errors_seen_.insert(line).second) new_error_ = j["error"].get<std::string>();
            continue;
        }
        if (!j.contains("loss") || !j.contains("step") || !j["step"].is_number_integer()) continue;
        const int64_t step = j["step"].get<int64_t>();
        std::string& seen = steps_[step];
        if (seen == line) continue;
        seen = line;
        if (!first || step < *first) first = step;
    }
    return first;
}

std::string MetricsWatch::take_new_error() {
    scan();
    std::string e;
    e.swap(new_error_);
    return e;
}

Outcome run_attempt(const LauncherSpec& spec, const std::vector<std::string>& train, int attempt,
                    MetricsWatch* metrics,
                    const std::function<void(std::optional<int64_t>, Clock::time_point)>&
                        on_first_step) {
    ::setenv("ZT_LAUNCH_ATTEMPT", std::to_string(attempt).c_str(), 1);
    const std::vector<std::string> cmd = launcher_command(spec, train);
    std::string shown;
    for (const std::string& a : cmd) shown += (shown.empty() ? "" : " ") + a;
    log_line("attempt ", attempt, ": ", shown);
    Outcome o;
    if (g_stop_signals > 0) {  // asked to stop before it started
        o.stopped = true;
        o.status = 128 + g_last_stop_signal;
        o.ended = Clock::now();
        return o;
    }
    int fd = -1;
    const pid_t pid = spawn(cmd, &fd);
    StderrRelay relay(fd);
    int forwarded = g_stop_signals;
    for (;;) {
        relay.pump(kPollMs, o);
        if (g_stop_signals != forwarded) {
            forwarded = g_stop_signals;
            forward_stop(spec, pid, g_last_stop_signal);
            o.stopped = true;
        }
        int st = 0;
        if (::waitpid(pid, &st, WNOHANG) == pid) {
            o.status = st;
            o.ended = Clock::now();
            break;
        }
        if (metrics && !o.first_step) {
            if (std::optional<int64_t> s = metrics->scan()) {
                o.first_step = s;
                on_first_step(s, Clock::now());
            }
        }
    }
    end_leftovers();
    const Clock::time_point until =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(kDrainSeconds));
    while (relay.open() && Clock::now() < until) relay.pump(kPollMs, o);
    if (metrics && !o.first_step) {  // a step just before the end: timed by the exit
        o.first_step = metrics->scan();
        if (o.first_step) on_first_step(o.first_step, o.ended);
    }
    return o;
}

}  // namespace zt::cli
