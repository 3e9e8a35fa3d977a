// `zerotrain launch`, the supervisor (docs/launch.md): runs `train` under mpirun (srun inside a
// Slurm allocation) as a child in its own process group, watches it, and when the job fails (a
// rank crashed, was killed, ran out of memory) ends what is left of it and starts it again with
// `--resume auto`, so that it continues from its newest complete checkpoint. Each restart is
// logged with its cause to stderr and RUN_DIR/restarts.jsonl. It never restarts after a clean
// exit, after a stop signal it passed on to the ranks, or after bad input (exit code 2).
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "cli/commands.h"
#include "checkpoint/sealed_text.h"
#include "cli/launch_process.h"
#include "runtime/config.h"
#include "runtime/supervisor_watch.h"
#include "util/error.h"
#include "util/log.h"

namespace zt::cli {

namespace {

namespace fs = std::filesystem;

// The job after `--`, as the user gave it, and what the supervisor needs to know of it.
struct Job {
    std::vector<std::string> args;  // train CONFIG ...
    std::string config, run_dir;
    std::vector<std::string> sets;  // its --set values, in order
};

bool is_resume_value(const std::string& s) { return s == "auto" || s == "latest"; }

Job parse_job(const std::vector<std::string>& a) {
    ZT_CHECK(!a.empty() && a[0] == "train",
             "launch: expected the job after --, as in `zerotrain launch -n 2 -- train "
             "CONFIG ...`, got \"", a.empty() ? std::string() : a[0], "\"");
    static const std::set<std::string> kValued{
        "--set",        "--run-dir",    "--threads", "--memory-budget", "--memory-timeline",
        "--rank-speed", "--rank-memory"};
    Job job;
    job.args = a;
    for (size_t i = 1; i < a.size(); ++i) {
        const std::string& t = a[i];
        if (t.rfind("--", 0) != 0) {
            if (job.config.empty()) job.config = t;
            continue;
        }
        const size_t eq = t.find('=');
        const std::string name = t.substr(0, eq);
        ZT_CHECK(name != "--ranks", "launch: `train --ranks` runs ranks as threads of one "
                                    "process; under launch the ranks are the launcher's "
                                    "processes: drop --ranks and give launch -n N");
        std::optional<std::string> value;
        if (eq != std::string::npos)
            value = t.substr(eq + 1);
        else if (kValued.count(name) && i + 1 < a.size())
            value = a[++i];
        else if (name == "--resume" && i + 1 < a.size() && is_resume_value(a[i + 1]))
            ++i;
        if (name == "--set" && value) job.sets.push_back(*value);
        if (name == "--run-dir" && value) job.run_dir = *value;
    }
    ZT_CHECK(!job.config.empty(), "launch: no config file after `train`");
    if (job.run_dir.empty())  // train's default (cli/commands.cpp)
        job.run_dir = "runs/" + fs::path(job.config).stem().string();
    return job;
}

bool asks_to_resume(const std::vector<std::string>& a) {
    return std::any_of(a.begin(), a.end(), [](const std::string& s) {
        return s == "--resume" || s.rfind("--resume=", 0) == 0;
    });
}

// Note [Restart arguments]: the supervisor never changes what the user asked for. A job given
// --resume (or --resume auto) restarts with the user's arguments as they are. A fresh job restarts
// fresh, as given, until the supervisor has itself seen a checkpoint written by this job (`latest`
// changed); then it drops --overwrite (which would delete that checkpoint) and adds `--resume`,
// strict: a checkpoint it saw written that cannot be read is an error, not a fresh start.
std::vector<std::string> restart_args(const std::vector<std::string>& a, bool seen_checkpoint) {
    if (asks_to_resume(a) || !seen_checkpoint) return a;
    std::vector<std::string> out;
    for (const std::string& s : a)
        if (s != "--overwrite") out.push_back(s);
    out.push_back("--resume");
    return out;
}

// Ranks, and the accumulation that keeps train_batch_size there (0: the config's own).
struct Layout {
    int ranks = 0;
    int64_t grad_accum = 0;
};

// Note [Elastic restart]: the global batch train_batch_size = micro x accumulation x dp stays;
// the micro-batch stays (it sets the memory per rank); so a smaller world N' fits when
// dp' = N' / (tensor x pipeline) is whole and train_batch_size / (micro x dp') is a whole
// accumulation. The largest such N' in [min_ranks, from) is taken; the config must parse there.
std::optional<Layout> smaller_layout(const nlohmann::json& j, int full, int from, int min_ranks) {
    const ParsedConfig base = parse_config(j, full);
    const TrainConfig& c = base.config;
    const int64_t group = full / c.dp;  // tensor x pipeline
    for (int n = from - 1; n >= std::max(1, min_ranks); --n) {
        if (n % group != 0) continue;
        const int64_t dp = n / group;
        if (c.train_batch_size % (c.micro_batch * dp) != 0) continue;
        const int64_t accum = c.train_batch_size / (c.micro_batch * dp);
        nlohmann::json k = j;
        k["gradient_accumulation_steps"] = accum;
        try {
            if (parse_config(k, n).config.train_batch_size == c.train_batch_size)
                return Layout{n, accum};
        } catch (const Error&) {
        }
    }
    return std::nullopt;
}

std::string iso_time_now() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

int exit_code_of(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

std::string status_text(int status) {
    if (WIFSIGNALED(status))
        return str_cat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)),
                       ")");
    return str_cat("exit code ", exit_code_of(status));
}

// The newest complete checkpoint's step, as `latest` names it (its checksum verified); -1 when
// unknown.
int64_t latest_step(const std::string& checkpoint_dir) {
    std::ifstream f(checkpoint_dir + "/latest", std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::optional<std::string> name = open_latest_text(text);
    if (!name) return -1;
    return std::atoll(name->c_str() + 5);
}

// The text of `latest`, "" when absent.
std::string latest_text(const std::string& checkpoint_dir) {
    std::ifstream f(checkpoint_dir + "/latest", std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void append_line(const std::string& path, const nlohmann::json& j) {
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    std::ofstream f(path, std::ios::app);
    f << j.dump() << "\n";
    if (!f) log_line("cannot write ", path);
}

// What the supervisor knows of the job: the user's config (for the elastic arithmetic and the
// checkpoint directory), when it can be read.
struct JobConfig {
    nlohmann::json json;
    bool loaded = false;
    std::string checkpoint_dir;
};

JobConfig read_job_config(const Job& job, bool required) {
    JobConfig jc;
    jc.checkpoint_dir = job.run_dir + "/checkpoints";
    try {
        jc.json = load_config_file(job.config);
        for (const std::string& s : job.sets) apply_override(jc.json, s);
        jc.loaded = true;
        if (jc.json.contains("checkpoint") && jc.json["checkpoint"].contains("dir") &&
            jc.json["checkpoint"]["dir"].is_string())
            jc.checkpoint_dir = jc.json["checkpoint"]["dir"].get<std::string>();
    } catch (const Error&) {
        if (required) throw;  // elastic needs it; otherwise the job reports the problem itself
    }
    return jc;
}

}  // namespace

int run_launch(const LaunchArgs& args) {
    const Job job = parse_job(args.job);
    ZT_CHECK(args.min_ranks <= args.ranks, "launch: --min-ranks ", args.min_ranks,
             " is more than -n ", args.ranks);
    const bool elastic = args.min_ranks > 0 && args.min_ranks < args.ranks;
    const JobConfig cfg = read_job_config(job, elastic);
    if (elastic) parse_config(cfg.json, args.ranks);  // a config error now, not at a restart
    LauncherSpec spec;
    spec.srun = args.launcher == "srun" ||
                (args.launcher == "auto" && std::getenv("SLURM_JOB_ID") != nullptr);
    spec.extra = split_words(args.launcher_args);
    spec.exe = self_executable();
    install_supervisor_signals();
    // Orphaned ranks come back to us, to be ended; without it they are still ended through the
    // supervisor watch (runtime/supervisor_watch.h), so a refusal is worth a warning only.
    if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        log_warn("launch: prctl(PR_SET_CHILD_SUBREAPER): ", std::strerror(errno),
                 "; ranks orphaned by a dead launcher are left to the supervisor watch");
    const std::string restarts_path = job.run_dir + "/restarts.jsonl";
    // The ranks on this host end when the supervisor dies (runtime/supervisor_watch.h).
    ::setenv(kSupervisorPidEnv, std::to_string(::getpid()).c_str(), 1);
    {
        char host[256] = {};
        if (::gethostname(host, sizeof host - 1) == 0) ::setenv(kSupervisorHostEnv, host, 1);
    }
    // What `latest` names before the job runs: a restart resumes only from a checkpoint this job
    // wrote (Note [Restart arguments]).
    const std::string latest_before = latest_text(cfg.checkpoint_dir);

    MetricsWatch metrics(job.run_dir + "/metrics.jsonl");
    Layout layout{args.ranks, 0};
    // The record of the restart in progress: written at its first step, when the recovery time
    // is known, or when it ends without one.
    std::optional<nlohmann::json> record;
    Clock::time_point failed_at;
    auto write_record = [&](std::optional<int64_t> first_step, Clock::time_point at) {
        if (!record) return;
        if (first_step) {
            const double s = std::chrono::duration<double>(at - failed_at).count();
            (*record)["resumed_from"] = *first_step - 1;
            (*record)["recovery_s"] = std::round(s * 1000) / 1000;
            log_line("restart ", (*record)["attempt"].get<int>(), ": resumed from step ",
                     *first_step - 1, ", first step ", s, " s after the failure");
        } else if (const int64_t l = latest_step(cfg.checkpoint_dir); l >= 0) {
            (*record)["resumed_from"] = l;  // what it would have resumed from
        }
        append_line(restarts_path, *record);
        record.reset();
    };
    for (int attempt = 0;; ++attempt) {
        const bool seen_checkpoint = latest_step(cfg.checkpoint_dir) >= 0 &&
                                     latest_text(cfg.checkpoint_dir) != latest_before;
        std::vector<std::string> train =
            attempt == 0 ? job.args : restart_args(job.args, seen_checkpoint);
        if (layout.grad_accum > 0)
            train.insert(train.end(), {"--set", str_cat("gradient_accumulation_steps=",
                                                        layout.grad_accum)});
        spec.ranks = layout.ranks;
        metrics.scan();  // what is there before this attempt is not its progress
        const Outcome o = run_attempt(spec, train, attempt, attempt > 0 ? &metrics : nullptr,
                                      write_record);
        write_record(std::nullopt, o.ended);
        const int code = exit_code_of(o.status);
        if (o.stopped) {
            log_line("the job was stopped by a signal (", status_text(o.status),
                     "); not restarting");
            return code;
        }
        if (code == 0) return 0;
        std::string cause = str_cat(spec.srun ? "srun " : "mpirun ", status_text(o.status));
        if (!o.launcher_note.empty()) cause += ": " + o.launcher_note;
        if (const std::string e = metrics.take_new_error(); !e.empty())
            cause += "; metrics.jsonl: " + e;
        log_line("attempt ", attempt, " on ", layout.ranks, " ranks failed: ", cause);
        if (code == 2) {
            log_line("bad input (exit code 2): not restarting");
            return code;
        }
        if (attempt >= args.max_restarts) {
            log_line("error: giving up after ", attempt, " restart(s) (--max-restarts ",
                     args.max_restarts, "); the last failure: ", cause);
            return code;
        }
        const int before = layout.ranks;
        if (elastic && attempt > 0 && !o.first_step) {
            if (std::optional<Layout> l = smaller_layout(cfg.json, args.ranks, layout.ranks,
                                                         args.min_ranks)) {
                layout = *l;
                log_line("elastic: the restart on ", before, " ranks failed before its first "
                         "step; going on with ", layout.ranks, " ranks and "
                         "gradient_accumulation_steps ", layout.grad_accum,
                         " (the same train_batch_size)");
            } else {
                log_line("elastic: no rank count in [", args.min_ranks, ", ", before,
                         ") keeps train_batch_size with a whole accumulation; retrying on ",
                         before);
            }
        }
        record = nlohmann::json{{"time", iso_time_now()}, {"attempt", attempt + 1},
                                {"cause", cause}, {"exit_code", code},
                                {"ranks", layout.ranks}, {"previous_ranks", before},
                                {"resumed_from", nullptr}, {"recovery_s", nullptr}};
        if (o.failed_rank >= 0) (*record)["rank"] = o.failed_rank;
        if (layout.grad_accum > 0) (*record)["gradient_accumulation_steps"] = layout.grad_accum;
        failed_at = o.failure_seen.value_or(o.ended);
        const bool resumes = asks_to_resume(job.args) ||
                             (latest_step(cfg.checkpoint_dir) >= 0 &&
                              latest_text(cfg.checkpoint_dir) != latest_before);
        log_line("restart ", attempt + 1, " of at most ", args.max_restarts, " on ",
                 layout.ranks, " ranks, ",
                 resumes ? "from the newest checkpoint"
                         : "from the start (this job wrote no checkpoint yet)");
    }
}

}  // namespace zt::cli
