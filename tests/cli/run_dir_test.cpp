// The run directory as a user meets it (docs/launch.md, "One job per run directory"; DESIGN's exit
// codes): a --run-dir that names a file is bad input (2); a disk that fills up is a failure (1,
// so a supervisor may retry) and leaves nothing that looks like a run; a second job on a run
// directory held by a live one exits 2 naming the holder, and the lock of a job that died is taken
// over with a warning.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "cli/cli_fixture.h"

using zt::testing::Cli;
using zt::testing::CommandResult;
namespace fs = std::filesystem;

namespace {

class RunDir : public Cli {
protected:
    std::string train_cmd(const std::string& cfg, const std::string& run_dir,
                          const std::string& args = "") {
        return std::string(ZT_BINARY) + " train " + cfg + " --quiet --run-dir " + run_dir + " " +
               args;
    }
    // The command under a file-size limit of `kib` KiB: a write past it fails with EFBIG (SIGXFSZ
    // ignored), as one on a full disk fails with ENOSPC; files can still be created.
    CommandResult limited(const std::string& cmd, int kib) {
        return zt::testing::run_command("bash -c \"trap '' XFSZ; ulimit -f " +
                                        std::to_string(kib) + "; exec " + cmd + "\"");
    }
    // Starts cmd in the background (its own pid, through exec); the caller waits for it.
    pid_t start(const std::string& cmd, const std::string& log) {
        const std::string line = "exec " + cmd + " > " + log + " 2>&1";
        const pid_t pid = fork();
        if (pid == 0) {
            execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
            _exit(127);
        }
        return pid;
    }
    static bool has_step_line(const std::string& run_dir) {
        std::ifstream f(run_dir + "/metrics.jsonl");
        std::string line;
        return static_cast<bool>(std::getline(f, line)) && line.find("\"loss\"") != std::string::npos;
    }
};

// Waits (event-based, up to 60 s) until `ok` holds.
template <typename F>
bool wait_for(F ok) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!ok()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return true;
}

}  // namespace

TEST_F(RunDir, RunDirThatIsAFileIsBadInput) {
    const std::string file = (dir_ / "a_file").string();
    std::ofstream(file) << "not a directory\n";
    for (const std::string ranks : {"", "--ranks 2"}) {
        nlohmann::json j = tiny();
        j["train_batch_size"] = 4;
        CommandResult r = zt::testing::run_command(train_cmd(write_config(j), file, ranks));
        EXPECT_EQ(r.code, 2) << ranks << "\n" << r.output;
        EXPECT_NE(r.output.find("a_file"), std::string::npos) << r.output;
        EXPECT_NE(r.output.find("not a directory"), std::string::npos) << r.output;
    }
}

TEST_F(RunDir, FullDiskAtTheFinalWeightsIsAFailureNotBadInput) {
    // metrics.jsonl and config.json (a few KiB) fit under 12 KiB; the weights (18 KiB) do not.
    const std::string rd = (dir_ / "run").string();
    CommandResult r = limited(train_cmd(write_config(tiny()), rd), 12);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("model.safetensors"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(rd + "/model.safetensors"));
}

TEST_F(RunDir, DiskFullFromTheStartLeavesNothingBehind) {
    for (const bool existed : {false, true}) {
        const std::string rd = (dir_ / (existed ? "made" : "fresh")).string();
        if (existed) fs::create_directories(rd);
        CommandResult r = limited(train_cmd(write_config(tiny()), rd), 0);
        EXPECT_EQ(r.code, 1) << r.output;
        for (const char* f : {"metrics.jsonl", "config.json", "model.safetensors"})
            EXPECT_FALSE(fs::exists(rd + "/" + f)) << f << " left behind\n" << r.output;
        EXPECT_EQ(fs::exists(rd), existed) << "a failed start leaves no directory it made, and "
                                              "keeps the user's own";
    }
}

// The run's config.json is the first file past a few bytes (the lock and an empty metrics.jsonl
// come before it): a 1 KiB limit and a config that dumps to more fail exactly that write, which
// must end the run (exit 1) naming the file, leaving nothing behind.
TEST_F(RunDir, FailedConfigJsonWriteIsAFailure) {
    nlohmann::json j = tiny();
    j["csv_monitor"] = {{"enabled", false}, {"job_name", std::string(1500, 'j')}};  // > 1 KiB
    const std::string rd = (dir_ / "run").string();
    CommandResult r = limited(train_cmd(write_config(j), rd), 1);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("config.json"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(rd)) << r.output;
}

TEST_F(RunDir, SecondJobOnAHeldRunDirExitsTwoNamingTheHolder) {
    nlohmann::json j = tiny();
    j["steps"] = 1000000;
    j["train_batch_size"] = 4;
    j.erase("eval_interval");
    const std::string cfg = write_config(j);
    const std::string rd = (dir_ / "run").string();
    for (const std::string ranks : {"", "--ranks 2"}) {
        fs::remove_all(rd);
        const pid_t first = start(train_cmd(cfg, rd, ranks), (dir_ / "first.log").string());
        ASSERT_TRUE(wait_for([&] { return has_step_line(rd); })) << ranks;
        CommandResult r =
            zt::testing::run_command("timeout 20 " + train_cmd(cfg, rd, "--resume auto " + ranks));
        EXPECT_EQ(r.code, 2) << ranks << "\n" << r.output;
        EXPECT_NE(r.output.find("pid " + std::to_string(first)), std::string::npos) << r.output;
        char host[256] = {};
        gethostname(host, sizeof host - 1);
        EXPECT_NE(r.output.find(host), std::string::npos) << r.output;
        // The first job dies without releasing its lock: the next job takes the stale lock over.
        kill(first, SIGKILL);
        int status = 0;
        waitpid(first, &status, 0);
        j["steps"] = 2;
        r = zt::testing::run_command(train_cmd(write_config(j, "short.json"), rd,
                                               "--overwrite " + ranks));
        EXPECT_EQ(r.code, 0) << r.output;
        EXPECT_NE(r.output.find("stale"), std::string::npos) << r.output;
        EXPECT_FALSE(fs::exists(rd + "/zerotrain.lock")) << "released at exit";
        j["steps"] = 1000000;
    }
}

TEST_F(RunDir, UnderMpirunRankZeroHoldsTheLock) {
    nlohmann::json j = tiny();
    j["steps"] = 1000000;
    j["train_batch_size"] = 4;
    j.erase("eval_interval");
    const std::string cfg = write_config(j);
    const std::string rd = (dir_ / "run").string();
    const std::string env =
        "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 "
        "OMP_WAIT_POLICY=passive OMPI_MCA_btl=self,vader ";
    const pid_t first = start(env + "mpirun --oversubscribe -np 2 " + train_cmd(cfg, rd),
                              (dir_ / "first.log").string());
    ASSERT_TRUE(wait_for([&] { return has_step_line(rd); }));
    CommandResult r = zt::testing::run_command(env + "timeout 20 mpirun --oversubscribe -np 2 " +
                                               train_cmd(cfg, rd, "--resume auto"));
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("zerotrain.lock"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("MPI_ABORT"), std::string::npos) << "every rank exits 2:\n" << r.output;
    kill(first, SIGTERM);  // mpirun passes it on (and kills the ranks soon after)
    int status = 0;
    waitpid(first, &status, 0);
}
