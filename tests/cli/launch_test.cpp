// `zerotrain launch`, the supervisor (docs/launch.md), as a user runs it: 2- and 4-rank mpirun
// jobs in which a rank SIGKILLs itself (ZT_FAULT) after a step chosen at random (seeded) or in
// the middle of writing its checkpoint shard finish with final weights equal, bit for bit, to an
// uninterrupted run's; the elastic restart on fewer ranks keeps the global batch (losses within
// the equivalence rule's 1e-4); exhausted restarts, bad input and SIGTERM end the supervisor
// with the job's code and a clear message.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <thread>

#include "cli/cli_fixture.h"

using zt::testing::Cli;
using zt::testing::CommandResult;
namespace fs = std::filesystem;

namespace {

constexpr int kSteps = 12;
constexpr const char* kMpiEnv =
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 "
    "OMP_WAIT_POLICY=passive OMPI_MCA_btl=self,vader ";

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
    std::vector<nlohmann::json> out;
    std::ifstream f(path);
    for (std::string line; std::getline(f, line);) out.push_back(nlohmann::json::parse(line));
    return out;
}

std::vector<double> train_losses(const std::string& run_dir) {
    std::vector<double> l;
    for (const nlohmann::json& j : read_jsonl(run_dir + "/metrics.jsonl"))
        if (j.contains("loss")) l.push_back(j["loss"]);
    return l;
}

class Launch : public Cli {
protected:
    // micro-batch 2, accumulation 1 per rank; a checkpoint every 3 steps.
    nlohmann::json config(int ranks, bool async = false) {
        nlohmann::json j = tiny();
        j["steps"] = kSteps;
        j["train_batch_size"] = 2 * ranks;
        j["gradient_accumulation_steps"] = 1;
        j["checkpoint"] = {{"interval_steps", 3}, {"async", async}};
        return j;
    }
    // `zerotrain launch ARGS -- train CONFIG --quiet --run-dir DIR` with ZT_FAULT = fault.
    // `train_args` go after the run directory.
    CommandResult launch(const std::string& args, const nlohmann::json& cfg,
                         const std::string& name, const std::string& fault = "",
                         const std::string& train_args = "") {
        const std::string path = write_config(cfg, name + ".json");
        return zt::testing::run_command(
            std::string(kMpiEnv) + (fault.empty() ? "" : "ZT_FAULT='" + fault + "' ") +
            "timeout 120 " + ZT_BINARY + " launch " + args + " -- train " + path +
            " --quiet --run-dir " + run(name) + " " + train_args);
    }
    // An uninterrupted run under plain mpirun.
    void reference(int ranks, const std::string& name) {
        const std::string path = write_config(config(ranks), name + ".json");
        CommandResult r = zt::testing::run_command(
            std::string(kMpiEnv) + "timeout 120 mpirun --oversubscribe -np " +
            std::to_string(ranks) + " " + ZT_BINARY + " train " + path + " --quiet --run-dir " +
            run(name));
        ASSERT_EQ(r.code, 0) << r.output;
    }
    std::string run(const std::string& name) { return (dir_ / name).string(); }
    void expect_same_weights(const std::string& a, const std::string& b) {
        const std::string wa = read_file(run(a) + "/model.safetensors");
        ASSERT_FALSE(wa.empty()) << a << " has no final weights";
        EXPECT_TRUE(wa == read_file(run(b) + "/model.safetensors"))
            << a << " and " << b << " differ";
    }
};

// A kill step drawn from a fixed seed: not always on or off a checkpoint step.
int random_kill_step(uint32_t seed) {
    std::mt19937 rng(seed);
    return std::uniform_int_distribution<int>(2, kSteps - 1)(rng);
}

}  // namespace

TEST_F(Launch, TwoRanksKilledAtRandomStepFinishesBitExact) {
    reference(2, "ref");
    const int step = random_kill_step(20240611);
    CommandResult r = launch("-n 2", config(2), "killed",
                             "kill:rank=1:step=" + std::to_string(step));
    ASSERT_EQ(r.code, 0) << r.output;
    expect_same_weights("killed", "ref");
    const std::vector<nlohmann::json> rec = read_jsonl(run("killed") + "/restarts.jsonl");
    ASSERT_EQ(rec.size(), 1u) << r.output;
    EXPECT_EQ(rec[0]["attempt"], 1);
    EXPECT_EQ(rec[0]["rank"], 1) << rec[0].dump();
    EXPECT_NE(rec[0]["cause"].get<std::string>().find("signal 9"), std::string::npos);
    EXPECT_EQ(rec[0]["resumed_from"], step / 3 * 3) << "the newest checkpoint before the kill";
    EXPECT_GT(rec[0]["recovery_s"].get<double>(), 0.0);
    std::printf("[ launch ] killed after step %d; recovery %.3f s\n", step,
                rec[0]["recovery_s"].get<double>());
}

TEST_F(Launch, TwoRanksKilledDuringCheckpointWriteFinishesBitExact) {
    reference(2, "ref");
    CommandResult r = launch("-n 2", config(2), "killed", "kill_in_checkpoint:rank=1:step=9");
    ASSERT_EQ(r.code, 0) << r.output;
    expect_same_weights("killed", "ref");
    const std::vector<nlohmann::json> rec = read_jsonl(run("killed") + "/restarts.jsonl");
    ASSERT_EQ(rec.size(), 1u) << r.output;
    EXPECT_EQ(rec[0]["resumed_from"], 6) << "step 9's checkpoint never became visible";
}

TEST_F(Launch, FourRanksKilledTwiceAsyncCheckpointsFinishesBitExact) {
    reference(4, "ref");
    const int step = random_kill_step(7);
    // Attempt 0: rank 2 dies writing (on its background thread) the checkpoint of step 6;
    // attempt 1, resumed from step 3: rank 3 dies after the random step (past 3).
    const std::string fault = "kill_in_checkpoint:rank=2:step=6:attempt=0,kill:rank=3:step=" +
                              std::to_string(std::max(step, 4)) + ":attempt=1";
    CommandResult r = launch("-n 4", config(4, true), "killed", fault);
    ASSERT_EQ(r.code, 0) << r.output;
    expect_same_weights("killed", "ref");
    const std::vector<nlohmann::json> rec = read_jsonl(run("killed") + "/restarts.jsonl");
    ASSERT_EQ(rec.size(), 2u) << r.output;
    EXPECT_EQ(rec[0]["resumed_from"], 3);
    EXPECT_EQ(rec[1]["attempt"], 2);
}

TEST_F(Launch, ExhaustedRestartsGiveUpWithTheJobsCode) {
    CommandResult r = launch("-n 2 --max-restarts 1", config(2), "doomed",
                             "kill:rank=0:step=2:attempt=*");
    EXPECT_EQ(r.code, 137) << r.output;  // mpirun's code for a rank killed by SIGKILL
    EXPECT_NE(r.output.find("giving up after 1 restart(s) (--max-restarts 1)"), std::string::npos)
        << r.output;
    EXPECT_EQ(read_jsonl(run("doomed") + "/restarts.jsonl").size(), 1u);
    EXPECT_FALSE(fs::exists(run("doomed") + "/model.safetensors"));
}

TEST_F(Launch, BadInputIsNotRestarted) {
    nlohmann::json j = config(2);
    j["train_batch_size"] = 5;  // not micro x accumulation x ranks
    CommandResult r = launch("-n 2", j, "bad");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("not restarting"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(run("bad") + "/restarts.jsonl"));
}

TEST_F(Launch, SigtermStopsTheJobWithACheckpointAndNoRestart) {
    nlohmann::json j = config(2);
    j["steps"] = 1000000;
    j.erase("eval_interval");
    const std::string path = write_config(j, "long.json");
    const std::string cmd = std::string("exec env ") + kMpiEnv + ZT_BINARY +
                            " launch -n 2 -- train " + path + " --quiet --run-dir " +
                            run("long") + " > " + run("log") + " 2>&1";
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
        _exit(127);
    }
    using namespace std::chrono;
    const auto deadline = steady_clock::now() + seconds(60);
    while (train_losses(run("long")).size() < 2 && steady_clock::now() < deadline)
        std::this_thread::sleep_for(milliseconds(50));
    kill(pid, SIGTERM);
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0 && steady_clock::now() < deadline)
        std::this_thread::sleep_for(milliseconds(50));
    if (steady_clock::now() >= deadline) kill(pid, SIGKILL);
    const std::string log = read_file(run("log"));
    ASSERT_TRUE(WIFEXITED(status)) << log;
    EXPECT_EQ(WEXITSTATUS(status), 0) << log;
    EXPECT_NE(log.find("not restarting"), std::string::npos) << log;
    EXPECT_TRUE(fs::exists(run("long") + "/checkpoints/latest")) << log;
    EXPECT_FALSE(fs::exists(run("long") + "/model.safetensors"));
    EXPECT_FALSE(fs::exists(run("long") + "/restarts.jsonl"));
}

TEST_F(Launch, ElasticRestartOnFewerRanksKeepsTheGlobalBatch) {
    reference(4, "ref");
    // Attempt 0 loses rank 1 after step 4; the restart on 4 ranks fails at start (a host gone),
    // so attempt 2 runs on 2 ranks (3 does not divide the batch of 8) with accumulation 2.
    CommandResult r = launch("-n 4 --min-ranks 2", config(4), "elastic",
                             "kill:rank=1:step=4,fail_start:world=4:attempt=1");
    ASSERT_EQ(r.code, 0) << r.output;
    const std::vector<nlohmann::json> rec = read_jsonl(run("elastic") + "/restarts.jsonl");
    ASSERT_EQ(rec.size(), 2u) << r.output;
    EXPECT_EQ(rec[1]["ranks"], 2);
    EXPECT_EQ(rec[1]["gradient_accumulation_steps"], 2);
    EXPECT_EQ(rec[1]["resumed_from"], 3);
    const std::vector<double> got = train_losses(run("elastic")), want = train_losses(run("ref"));
    ASSERT_EQ(got.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
    double worst = 0;
    for (int i = 0; i < kSteps; ++i) worst = std::max(worst, std::fabs(got[i] - want[i]) / want[i]);
    std::printf("[ equiv ] elastic 4 -> 2 ranks: max relative loss difference %.3g\n", worst);
    EXPECT_LE(worst, 1e-4);
}

// Bad input that shows only once the ranks open their inputs (after the config agreement): a
// missing data file, token ids past the vocabulary, a truncated init_from. Every launcher ends
// with exit code 2 (threads, plain mpirun without an MPI abort where every rank sees it at
// start, launch without a restart).
TEST_F(Launch, BadInputFoundByTheRanksExitsTwoAndIsNotRestarted) {
    // A token file of ids 0..199 for a vocabulary of 64.
    std::vector<uint16_t> ids(4096);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint16_t>(i % 200);
    const std::string tokens = (dir_ / "wide.bin").string();
    std::ofstream(tokens, std::ios::binary)
        .write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 2));
    // Initial weights cut in half.
    const std::string weights = (dir_ / "w.safetensors").string();
    ASSERT_EQ(zt::testing::run_zerotrain("export " + write_config(config(1), "e.json") +
                                         " --out " + weights).code, 0);
    fs::resize_file(weights, fs::file_size(weights) / 2);
    struct Case {
        std::string name, mentions;
        bool at_start;  // every rank finds it before training
        std::function<void(nlohmann::json&)> edit;
    };
    const std::vector<Case> cases = {
        {"nodata", "missing.bin", true,
         [&](nlohmann::json& j) {
             j["data"] = {{"type", "tokens"}, {"path", (dir_ / "missing.bin").string()}};
         }},
        {"vocab", "outside the vocabulary", false,
         [&](nlohmann::json& j) { j["data"] = {{"type", "tokens"}, {"path", tokens}}; }},
        {"init", "w.safetensors", true, [&](nlohmann::json& j) { j["init_from"] = weights; }},
    };
    for (const Case& c : cases) {
        nlohmann::json j = config(2);
        c.edit(j);
        const std::string path = write_config(j, c.name + ".json");
        CommandResult r = zt::testing::run_command(
            std::string(kMpiEnv) + "timeout 120 " + ZT_BINARY + " train " + path +
            " --quiet --ranks 2 --run-dir " + run(c.name + "_threads"));
        EXPECT_EQ(r.code, 2) << c.name << " under --ranks 2\n" << r.output;
        EXPECT_NE(r.output.find(c.mentions), std::string::npos) << r.output;
        r = zt::testing::run_command(std::string(kMpiEnv) +
                                     "timeout 120 mpirun --oversubscribe -np 2 " + ZT_BINARY +
                                     " train " + path + " --quiet --run-dir " +
                                     run(c.name + "_mpi"));
        EXPECT_EQ(r.code, 2) << c.name << " under mpirun\n" << r.output;
        EXPECT_NE(r.output.find(c.mentions), std::string::npos) << r.output;
        if (c.at_start) {
            EXPECT_EQ(r.output.find("MPI_ABORT"), std::string::npos)
                << c.name << ": every rank exits 2 by itself\n" << r.output;
        }
        r = launch("-n 2", j, c.name);
        EXPECT_EQ(r.code, 2) << c.name << " under launch\n" << r.output;
        EXPECT_NE(r.output.find(c.mentions), std::string::npos) << r.output;
        EXPECT_NE(r.output.find("not restarting"), std::string::npos) << r.output;
        EXPECT_EQ(r.output.find("restart 1"), std::string::npos) << r.output;
        EXPECT_FALSE(fs::exists(run(c.name) + "/restarts.jsonl"));
    }
}

// The supervisor never changes what the user asked for: --resume with nothing to resume from is
// bad input, not a fresh run; a fresh job that fails before its first checkpoint starts fresh
// again, and only one that has written a checkpoint resumes.
TEST_F(Launch, RestartsKeepWhatTheUserAskedFor) {
    CommandResult r = launch("-n 2", config(2), "empty", "", "--resume");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("no checkpoint to resume from"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("--resume auto"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(run("empty") + "/model.safetensors"));
    // Killed at step 2, before the first checkpoint (step 3): the restart is the same fresh run.
    r = launch("-n 2", config(2), "early", "kill:rank=1:step=2");
    ASSERT_EQ(r.code, 0) << r.output;
    const size_t at = r.output.find("attempt 1: ");
    ASSERT_NE(at, std::string::npos) << r.output;
    const std::string restart = r.output.substr(at, r.output.find('\n', at) - at);
    EXPECT_EQ(restart.find("--resume"), std::string::npos) << restart;
    // Killed at step 4, after the checkpoint of step 3: the restart resumes.
    r = launch("-n 2", config(2), "later", "kill:rank=1:step=4");
    ASSERT_EQ(r.code, 0) << r.output;
    const size_t at2 = r.output.find("attempt 1: ");
    ASSERT_NE(at2, std::string::npos) << r.output;
    const std::string restart2 = r.output.substr(at2, r.output.find('\n', at2) - at2);
    EXPECT_NE(restart2.find("--resume"), std::string::npos) << restart2;
    EXPECT_EQ(restart2.find("--resume auto"), std::string::npos) << restart2;
}

namespace {

// Pids of the processes whose command line mentions `needle`.
std::vector<pid_t> processes_mentioning(const std::string& needle) {
    std::vector<pid_t> out;
    for (const auto& e : fs::directory_iterator("/proc")) {
        const std::string name = e.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        std::string cmd = read_file(e.path().string() + "/cmdline");
        for (char& c : cmd)
            if (c == '\0') c = ' ';
        if (cmd.find(needle) != std::string::npos) out.push_back(std::stoi(name));
    }
    return out;
}

}  // namespace

// kill -9 of the supervisor alone: mpirun and the ranks end too, instead of training unsupervised.
TEST_F(Launch, RanksEndWhenTheSupervisorDies) {
    nlohmann::json j = config(2);
    j["steps"] = 1000000;
    j.erase("eval_interval");
    const std::string path = write_config(j, "orphan.json");
    const std::string cmd = std::string("exec env ") + kMpiEnv + ZT_BINARY +
                            " launch -n 2 -- train " + path + " --quiet --run-dir " +
                            run("orphan") + " > " + run("log") + " 2>&1";
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
        _exit(127);
    }
    using namespace std::chrono;
    auto deadline = steady_clock::now() + seconds(60);
    while (train_losses(run("orphan")).size() < 2 && steady_clock::now() < deadline)
        std::this_thread::sleep_for(milliseconds(50));
    ASSERT_GE(train_losses(run("orphan")).size(), 2u) << read_file(run("log"));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    // Ended by events (the ranks watch the supervisor's pid; mpirun has PR_SET_PDEATHSIG): they go
    // within milliseconds. Unwatched, they trained on for 5 s to minutes here (until mpirun wrote
    // to its dead supervisor's pipe), so 3 s tells the two apart.
    deadline = steady_clock::now() + seconds(3);
    std::vector<pid_t> left = processes_mentioning(path);
    while (!left.empty() && steady_clock::now() < deadline) {
        std::this_thread::sleep_for(milliseconds(100));
        left = processes_mentioning(path);
    }
    EXPECT_TRUE(left.empty()) << left.size() << " processes of the job outlived the supervisor";
    for (pid_t p : left) kill(p, SIGKILL);  // ours: started by this test
}
