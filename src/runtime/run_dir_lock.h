// One job per run directory (docs/launch.md, "One job per run directory"): RUN_DIR/zerotrain.lock
// names its holder (host, pid, start time) and is held with flock(2) for the holder's lifetime,
// so the kernel releases it however the holder ends; a lock file whose flock is free is stale
// (its holder died without removing it) and is taken over with a warning. Rank 0 of a job holds
// it (one lock per job, whatever the ranks). Leaves out waiting for a lock: a held run directory
// is an input error that names the holder.
#pragma once

#include <string>

namespace zt {

constexpr const char* kRunDirLockName = "zerotrain.lock";

// Throws zt::Error (kInput) when run_dir names something other than a directory, or when a live
// job holds its lock (naming the holder). Reads only; every rank may call it.
void check_run_dir(const std::string& run_dir);

class RunDirLock {
public:
    // Creates run_dir when missing and takes its lock; throws kInput as check_run_dir does, and
    // kInternal when the lock file cannot be written (then nothing is left behind).
    explicit RunDirLock(const std::string& run_dir);
    // Removes the lock file, then run_dir itself when this lock created it and it is empty.
    ~RunDirLock();
    RunDirLock(const RunDirLock&) = delete;
    RunDirLock& operator=(const RunDirLock&) = delete;

    bool created_dir() const { return created_; }

private:
    void release() noexcept;

    std::string dir_, path_;
    int fd_ = -1;
    bool created_ = false;
};

}  // namespace zt
