// Monitoring as a user turns it on (docs/monitoring.md): the TensorBoard and CSV sinks hold what
// metrics.jsonl holds, MFU against a configured GEMM ceiling, and under several ranks the
// gathered per-rank figures equal each rank's own (ZT_MONITOR_RANK_LOG) and a rank slowed by
// ZT_FAULT_SLOW_RANK is named a straggler.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <sstream>

#include "cli/cli_fixture.h"
#include "reader_required.h"

using zt::testing::Cli;
using zt::testing::CommandResult;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::vector<json> read_jsonl(const fs::path& path) {
    std::vector<json> out;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) out.push_back(json::parse(line));
    return out;
}

// step -> value from a csv_monitor file (header "step,NAME").
std::map<int64_t, double> read_csv(const fs::path& path, const std::string& header) {
    std::map<int64_t, double> m;
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line, header) << path;
    while (std::getline(in, line)) m[std::stoll(line)] = std::stod(line.substr(line.find(',') + 1));
    return m;
}

using MonitorCli = Cli;

TEST_F(MonitorCli, SinksHoldWhatMetricsJsonlHolds) {
    json j = tiny();
    j["steps"] = 4;
    j["tensorboard"] = {{"enabled", true}, {"output_path", (dir_ / "tb").string()},
                        {"job_name", "job"}};
    j["csv_monitor"] = {{"enabled", true}};  // output_path: the run directory
    j["monitor"] = {{"gemm_ceiling_flops", 2e9}};
    const std::string rd = (dir_ / "run").string();
    CommandResult r = zt::testing::run_zerotrain("train " + write_config(j) + " --quiet --run-dir " + rd);
    ASSERT_EQ(r.code, 0) << r.output;
    std::vector<json> steps, evals;
    for (const json& l : read_jsonl(rd + "/metrics.jsonl"))
        (l.contains("eval_loss") ? evals : steps).push_back(l);
    ASSERT_EQ(steps.size(), 4u);
    ASSERT_EQ(evals.size(), 2u);  // eval_interval 2
    for (const json& l : steps)
        EXPECT_DOUBLE_EQ(l["mfu"].get<double>(), l["mfu_flops_per_s"].get<double>() / 2e9);

    // CSV: one file per figure, exactly the metrics.jsonl values (%.17g round-trips a double).
    const fs::path csv = fs::path(rd) / "zerotrain";
    const auto loss = read_csv(csv / "train_loss.csv", "step,loss");
    const auto mfu = read_csv(csv / "train_mfu.csv", "step,mfu");
    const auto peak = read_csv(csv / "train_mem_peak_bytes.csv", "step,mem_peak_bytes");
    const auto step_time = read_csv(csv / "rank0_step_time_s.csv", "step,step_time_s");
    ASSERT_EQ(loss.size(), steps.size());
    for (const json& l : steps) {
        const int64_t s = l["step"];
        EXPECT_EQ(loss.at(s), l["loss"].get<double>());
        EXPECT_EQ(mfu.at(s), l["mfu"].get<double>());
        EXPECT_EQ(peak.at(s), l["mem"]["peak"].get<double>());
        EXPECT_EQ(step_time.at(s), l["step_time_s"].get<double>());  // steps_per_print 1
    }
    const auto eval = read_csv(csv / "eval_loss.csv", "step,loss");
    for (const json& l : evals) EXPECT_EQ(eval.at(l["step"].get<int64_t>()), l["eval_loss"].get<double>());

    // TensorBoard: read back by TensorBoard itself, every scalar at its step (as a float).
    if (zt::testing::run_command("python3 -c 'import tensorboard' >/dev/null 2>&1").code != 0)
        ZT_READER_MISSING("python3 has no tensorboard (pip install tensorboard)");
    std::ofstream(dir_ / "read.py") << R"(import sys
from tensorboard.backend.event_processing import event_accumulator as ea
acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0})
acc.Reload()
for tag in acc.Tags()["scalars"]:
    for e in acc.Scalars(tag):
        print(tag, e.step, repr(e.value))
)";
    r = zt::testing::run_command("python3 " + (dir_ / "read.py").string() + " " +
                                     (dir_ / "tb" / "job").string(), false);
    ASSERT_EQ(r.code, 0) << r.output;
    std::map<std::string, std::map<int64_t, double>> tb;
    std::istringstream in(r.output);
    std::string tag;
    int64_t s;
    double v;
    while (in >> tag >> s >> v) tb[tag][s] = v;
    auto as_float = [](const json& x) { return static_cast<double>(x.get<float>()); };
    for (const json& l : steps) {
        const int64_t st = l["step"];
        EXPECT_EQ(tb["train/loss"][st], as_float(l["loss"]));
        EXPECT_EQ(tb["train/lr"][st], as_float(l["lr"]));
        EXPECT_EQ(tb["train/grad_norm"][st], as_float(l["grad_norm"]));
        EXPECT_EQ(tb["train/tokens_per_s"][st], as_float(l["tokens_per_s"]));
        EXPECT_EQ(tb["train/mfu"][st], as_float(l["mfu"]));
        EXPECT_EQ(tb["train/mem_peak_bytes"][st], as_float(l["mem"]["peak"]));
        EXPECT_EQ(tb["rank0/step_time_s"][st], as_float(l["step_time_s"]));
    }
    for (const json& l : evals)
        EXPECT_EQ(tb["eval/loss"][l["step"].get<int64_t>()], as_float(l["eval_loss"]));
    EXPECT_EQ(tb["train/loss"].size(), steps.size());
}

TEST_F(MonitorCli, GatheredRankFiguresEqualEachRanksOwnAndNameTheStraggler) {
    json j = tiny();
    j["steps"] = 4;
    j["steps_per_print"] = 2;
    j["eval_interval"] = 0;
    j["csv_monitor"] = {{"enabled", true}};
    const std::string rd = (dir_ / "run").string();
    const fs::path own = dir_ / "own";
    // Rank 1 sleeps 0.2 s inside each step; a step of this model computes in milliseconds.
    CommandResult r = zt::testing::run_command(
        "ZT_MONITOR_RANK_LOG=" + own.string() + " ZT_FAULT_SLOW_RANK=1:0.2 " + ZT_BINARY +
        " train " + write_config(j) + " --quiet --ranks 2 --run-dir " + rd);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("straggler(s) rank 1 ("), std::string::npos) << r.output;
    std::vector<json> own_logs[2] = {read_jsonl(own / "rank_0.jsonl"),
                                     read_jsonl(own / "rank_1.jsonl")};
    std::vector<json> reported;
    for (const json& l : read_jsonl(rd + "/metrics.jsonl")) {
        if (!l.contains("ranks")) continue;
        reported.push_back(l);
        EXPECT_EQ(l["stragglers"], json::array({1})) << l.dump();
        int64_t peak = 0;
        for (int rank = 0; rank < 2; ++rank) {
            json mine = own_logs[rank].at(reported.size() - 1);
            EXPECT_EQ(mine["step"], l["step"]);
            mine.erase("step");
            EXPECT_EQ(l["ranks"][rank], mine) << "rank " << rank << " at step " << l["step"];
            peak = std::max(peak, mine["mem"]["peak"].get<int64_t>());
            const double parts = mine["compute_s"].get<double>() + mine["comm_s"].get<double>() +
                                 mine["io_s"].get<double>();
            EXPECT_NEAR(parts, mine["step_s"].get<double>(), 1e-12);
        }
        EXPECT_EQ(l["mem"]["peak"].get<int64_t>(), peak);
        EXPECT_GE(l["ranks"][1]["compute_s"].get<double>(), 0.2);  // the sleep is compute
        EXPECT_GE(l["ranks"][0]["comm_s"].get<double>(), 0.1);     // rank 0 waits for rank 1
    }
    ASSERT_EQ(reported.size(), 2u);  // steps 2 and 4
    EXPECT_EQ(own_logs[0].size(), 2u);
    EXPECT_EQ(own_logs[1].size(), 2u);
    // CSV per-rank files carry the straggler flag.
    std::ifstream flag(fs::path(rd) / "zerotrain" / "rank1_straggler.csv");
    std::stringstream ss;
    ss << flag.rdbuf();
    EXPECT_EQ(ss.str(), "step,straggler\n2,1\n4,1\n");
}

TEST_F(MonitorCli, PrometheusPortInUseIsAnInputError) {
    // Hold a listening socket on a free port, then ask the run for that port.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    ASSERT_EQ(::listen(fd, 1), 0);
    socklen_t len = sizeof sa;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    json j = tiny();
    j["monitor"] = {{"prometheus", {{"port", ntohs(sa.sin_port)}}}};
    CommandResult r = zt::testing::run_zerotrain("train " + write_config(j) + " --quiet --run-dir " +
                                                 (dir_ / "run").string());
    ::close(fd);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("monitor.prometheus"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "run")) << "a run that never started leaves nothing";
}

}  // namespace
