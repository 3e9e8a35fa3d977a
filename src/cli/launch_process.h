// The process side of `zerotrain launch` (cli/launch.cpp): starting the job under mpirun or srun
// in its own process group, watching it (its stderr, passed through, for what the launcher says
// about a failed rank; metrics.jsonl for the first step of a restart), passing stop signals on to
// the ranks, and ending what is left of a job once its launcher has exited. Linux only (/proc).
#pragma once

#include <sys/types.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "util/error.h"

namespace zt::cli {

using Clock = std::chrono::steady_clock;

// "zerotrain launch: ..." on stderr.
void log_line_text(const std::string& s);
template <typename... Args>
void log_line(const Args&... args) {
    log_line_text(str_cat(args...));
}

std::vector<std::string> split_words(const std::string& s);
std::string self_executable();  // this binary's path, resolved (/proc/self/exe)
// SIGTERM and SIGINT are counted, to be passed on to the job's ranks.
void install_supervisor_signals();

struct LauncherSpec {
    bool srun = false;               // else mpirun
    int ranks = 1;
    std::vector<std::string> extra;  // --launcher-args
    std::string exe;                 // the zerotrain binary the ranks run
};

// The step lines of metrics.jsonl seen so far, to tell the lines a restart writes from those it
// keeps: a step run again has another step_time_s, so its line differs.
class MetricsWatch {
public:
    explicit MetricsWatch(std::string path) : path_(std::move(path)) {}
    // Reads the file when it changed; returns the smallest step whose line is new.
    std::optional<int64_t> scan();
    // An error line ({"error": ...}) not reported before, else "".
    std::string take_new_error();

private:
    std::string path_;
    std::map<int64_t, std::string> steps_;
    std::set<std::string> errors_seen_;
    std::string new_error_;
    int64_t size_ = -1;
    int64_t mtime_ns_ = -1;
};

struct Outcome {
    int status = 0;                   // waitpid's, of the launcher
    bool stopped = false;             // a stop signal was passed on while it ran
    std::optional<int64_t> first_step;  // the first new step line (watched attempts only)
    Clock::time_point ended;          // when the launcher exited
    // When its output first told of a failure (mpirun waits a while before it ends the other
    // ranks, so this is nearer the failure than `ended`).
    std::optional<Clock::time_point> failure_seen;
    std::string launcher_note;        // what the launcher said of the failed rank
    int failed_rank = -1;
};

// Runs the job once (ZT_LAUNCH_ATTEMPT = attempt) and returns when it has ended and nothing of
// it is left. With `metrics`, calls on_first_step(step, when) at the attempt's first new step.
Outcome run_attempt(const LauncherSpec& spec, const std::vector<std::string>& train, int attempt,
                    MetricsWatch* metrics,
                    const std::function<void(std::optional<int64_t>, Clock::time_point)>&
                        on_first_step);

}  // namespace zt::cli
