// The monitor sinks (runtime/monitor/): TensorBoard event files read back by TensorBoard's own
// reader (the tensorboard package from PyPI; skipped without it), CSV files as DeepSpeed writes
// them, the Prometheus endpoint checked by `promtool check metrics` (Debian's prometheus package;
// skipped without it), stragglers by the median rule, and the config sections.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "run_command.h"
#include "runtime/config.h"
#include "runtime/monitor/csv_sink.h"
#include "runtime/monitor/monitor.h"
#include "runtime/monitor/prometheus_sink.h"
#include "runtime/monitor/tensorboard_sink.h"
#include "util/crc32c.h"
#include "util/error.h"
#include "reader_required.h"

namespace zt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path fresh_dir(const std::string& name) {
    fs::path d = fs::temp_directory_path() / ("zt_monitor_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Records of steps 1..n: loss 3 - 0.25 step, lr 1e-3 step, a bool, and two ranks' figures on
// even steps.
std::vector<MonitorRecord> sample_records(int n) {
    std::vector<MonitorRecord> out;
    for (int s = 1; s <= n; ++s) {
        MonitorRecord r;
        r.step = s;
        r.wall_time = 1.7e9 + s;
        r.scalars = {{"loss", 3.0 - 0.25 * s}, {"lr", 1e-3 * s}, {"skipped", 0.0}};
        if (s % 2 == 0)
            for (int k = 0; k < 2; ++k)
                r.ranks.push_back({{"step_time_s", 0.01 * (k + 1) * s}, {"straggler", k * 1.0}});
        out.push_back(r);
    }
    return out;
}

// tag -> step -> value for every scalar a record set holds (the expected contents of a sink).
std::map<std::string, std::map<int64_t, double>> expected_scalars(
    const std::vector<MonitorRecord>& recs) {
    std::map<std::string, std::map<int64_t, double>> m;
    for (const MonitorRecord& r : recs) {
        for (const MonitorScalar& s : r.scalars) m[monitor_tag(s.name)][r.step] = s.value;
        for (size_t k = 0; k < r.ranks.size(); ++k)
            for (const MonitorScalar& s : r.ranks[k]) m[monitor_rank_tag(k, s.name)][r.step] = s.value;
    }
    return m;
}

bool have_tensorboard() {
    return testing::run_command("python3 -c 'import tensorboard' >/dev/null 2>&1").code == 0;
}

// Every scalar in an event directory as "tag step value" lines, by TensorBoard's EventAccumulator.
std::map<std::string, std::map<int64_t, double>> read_with_tensorboard(const fs::path& dir) {
    const fs::path script = dir / "read_events.py";
    std::ofstream(script) << R"(import sys
from tensorboard.backend.event_processing import event_accumulator as ea
acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0})
acc.Reload()
for tag in acc.Tags()["scalars"]:
    for e in acc.Scalars(tag):
        print(tag, e.step, repr(e.value))
)";
    testing::CommandResult r =
        testing::run_command("python3 " + script.string() + " " + dir.string(), false);
    EXPECT_EQ(r.code, 0) << r.output;
    std::map<std::string, std::map<int64_t, double>> m;
    std::istringstream in(r.output);
    std::string tag;
    int64_t step;
    double v;
    while (in >> tag >> step >> v) m[tag][step] = v;
    return m;
}

TEST(Monitor, TfRecordFraming) {
    const std::string data = "123456789";
    const std::string f = tfrecord_frame(data);
    ASSERT_EQ(f.size(), 8 + 4 + data.size() + 4);
    uint64_t len;
    std::memcpy(&len, f.data(), 8);
    EXPECT_EQ(len, data.size());
    // The mask of TensorFlow's record format: rotate right by 15, add 0xa282ead8.
    const uint32_t crc = crc32c(data.data(), data.size());
    EXPECT_EQ(crc, 0xE3069283u);
    uint32_t stored;
    std::memcpy(&stored, f.data() + f.size() - 4, 4);
    EXPECT_EQ(stored, ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(Monitor, TensorBoardFilesReadBackByTensorBoard) {
    if (!have_tensorboard()) ZT_READER_MISSING("python3 has no tensorboard (pip install tensorboard)");
    const fs::path dir = fresh_dir("tb");
    const std::vector<MonitorRecord> recs = sample_records(6);
    {
        TensorBoardSink sink((dir / "job").string());
        EXPECT_NE(fs::path(sink.path()).filename().string().find("tfevents"), std::string::npos);
        for (const MonitorRecord& r : recs) sink.write(r);
    }
    const auto got = read_with_tensorboard(dir / "job");
    const auto want = expected_scalars(recs);
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [tag, steps] : want) {
        ASSERT_TRUE(got.count(tag)) << tag;
        ASSERT_EQ(got.at(tag).size(), steps.size()) << tag;
        for (const auto& [step, v] : steps)  // simple_value is a float
            EXPECT_EQ(got.at(tag).at(step), static_cast<double>(static_cast<float>(v)))
                << tag << " step " << step;
    }
    fs::remove_all(dir);
}

TEST(Monitor, CsvFilesAsDeepSpeedWritesThem) {
    const fs::path dir = fresh_dir("csv");
    const std::vector<MonitorRecord> recs = sample_records(4);
    {
        CsvSink sink(dir.string(), -1);
        for (const MonitorRecord& r : recs) sink.write(r);
    }
    EXPECT_EQ(slurp(dir / "train_loss.csv"), "step,loss\n1,2.75\n2,2.5\n3,2.25\n4,2\n");
    EXPECT_EQ(slurp(dir / "rank1_step_time_s.csv"), "step,step_time_s\n2,0.040000000000000001\n"
                                                     "4,0.080000000000000002\n");
    for (const auto& [tag, steps] : expected_scalars(recs)) {
        std::string file = tag;
        std::replace(file.begin(), file.end(), '/', '_');
        std::ifstream in(dir / (file + ".csv"));
        std::string line;
        std::getline(in, line);
        EXPECT_EQ(line, "step," + tag.substr(tag.rfind('/') + 1));
        size_t rows = 0;
        while (std::getline(in, line)) {
            const int64_t step = std::stoll(line);
            EXPECT_EQ(std::stod(line.substr(line.find(',') + 1)), steps.at(step)) << tag;
            ++rows;
        }
        EXPECT_EQ(rows, steps.size()) << tag;
    }
    {  // resumed from step 2: rows after it are dropped, then appended anew
        CsvSink sink(dir.string(), 2);
        sink.write(recs[2]);
    }
    EXPECT_EQ(slurp(dir / "train_loss.csv"), "step,loss\n1,2.75\n2,2.5\n3,2.25\n");
    fs::remove_all(dir);
}

// GET path from 127.0.0.1:port; the whole response.
std::string http_get(int port, const std::string& path) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    const std::string req = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
    EXPECT_EQ(::send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, static_cast<size_t>(n));
    ::close(fd);
    return out;
}

TEST(Monitor, PrometheusEndpointPassesPromtool) {
    PrometheusSink sink("127.0.0.1", 0);
    ASSERT_GT(sink.port(), 0);
    for (const MonitorRecord& r : sample_records(4)) sink.write(r);
    const std::string resp = http_get(sink.port(), "/metrics");
    ASSERT_EQ(resp.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << resp;
    EXPECT_NE(resp.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
    const std::string body = resp.substr(resp.find("\r\n\r\n") + 4);
    EXPECT_EQ(body, sink.render());
    EXPECT_NE(body.find("# TYPE zerotrain_loss gauge\nzerotrain_loss 2\n"), std::string::npos)
        << body;
    EXPECT_NE(body.find("zerotrain_step 4\n"), std::string::npos);
    EXPECT_NE(body.find("zerotrain_rank_step_time_seconds{rank=\"1\"} 0.080000000000000002\n"),
              std::string::npos)
        << body;
    EXPECT_NE(body.find("# HELP zerotrain_learning_rate"), std::string::npos) << body;
    EXPECT_EQ(http_get(sink.port(), "/other").rfind("HTTP/1.0 404", 0), 0u);
    if (testing::run_command("command -v promtool >/dev/null").code != 0)
        ZT_READER_MISSING("no promtool (Debian's prometheus package)");
    const fs::path dir = fresh_dir("prom");
    std::ofstream(dir / "metrics.txt") << body;
    testing::CommandResult r =
        testing::run_command("promtool check metrics < " + (dir / "metrics.txt").string());
    EXPECT_EQ(r.code, 0) << r.output << "\n" << body;
    fs::remove_all(dir);
}

TEST(Monitor, PrometheusNamesAndBadAddress) {
    EXPECT_EQ(prometheus_metric_name("step_time_s", false), "zerotrain_step_time_seconds");
    EXPECT_EQ(prometheus_metric_name("mem_peak_bytes", true), "zerotrain_rank_memory_peak_bytes");
    EXPECT_EQ(prometheus_metric_name("lr", false), "zerotrain_learning_rate");
    PrometheusSink first("127.0.0.1", 0);
    try {
        PrometheusSink second("127.0.0.1", first.port());
        FAIL() << "bound a port in use";
    } catch (const Error& e) {
        EXPECT_NE(e.message().find("monitor.prometheus.port"), std::string::npos) << e.message();
    }
}

RankFigures busy(double step_s, double comm_s) {
    RankFigures f;
    f.step_s = step_s;
    f.comm_s = comm_s;
    return f;
}

TEST(Monitor, StragglersAgainstTheMedianBusyTime) {
    // Busy times 1, 1, 1, 3 (median 1): only rank 3 passes 1.5 x. Step times alike, as
    // synchronizing collectives make them.
    std::vector<RankFigures> r = {busy(3, 2), busy(3, 2), busy(3, 2), busy(3, 0)};
    EXPECT_EQ(median_busy_s(r), 1.0);
    EXPECT_EQ(find_stragglers(r, 1.5), std::vector<int>{3});
    EXPECT_TRUE(find_stragglers(r, 3.0).empty());  // 3 is not more than 3 x 1
    // Two ranks: the median is their mean, (1 + 2) / 2; 2 > 1.25 x 1.5.
    std::vector<RankFigures> two = {busy(2, 1), busy(2, 0)};
    EXPECT_EQ(find_stragglers(two, 1.25), std::vector<int>{1});
    EXPECT_TRUE(find_stragglers(std::vector<RankFigures>{busy(5, 0)}, 1.0).empty());
    ::setenv("ZT_FAULT_SLOW_RANK", "1:0.25", 1);
    EXPECT_EQ(slow_rank_delay_s(1), 0.25);
    EXPECT_EQ(slow_rank_delay_s(0), 0.0);
    ::setenv("ZT_FAULT_SLOW_RANK", "1", 1);
    EXPECT_THROW(slow_rank_delay_s(0), Error);
    ::unsetenv("ZT_FAULT_SLOW_RANK");
}

TEST(Monitor, AddsRanksStragglersAndMfuOnReportSteps) {
    MonitorConfig mc;
    mc.gemm_ceiling_flops = 4e9;
    Monitor m(mc, MonitorOptions{"/nonexistent", 5, 2, -1});  // no sinks: writes nothing
    std::vector<RankFigures> r = {busy(0.5, 0.4), busy(0.5, 0.0)};
    r[1].io_s = 0.1;
    json line = {{"step", 1}, {"loss", 2.0}, {"mfu_flops_per_s", 1e9}};
    m.on_step(line, r);
    EXPECT_EQ(line["mfu"].get<double>(), 0.25);
    EXPECT_FALSE(line.contains("ranks"));  // step 1 is not a report step
    for (int step : {2, 5}) {               // every 2nd step, and the last
        line = {{"step", step}, {"loss", 2.0}};
        m.on_step(line, r);
        EXPECT_FALSE(line.contains("mfu"));
        ASSERT_TRUE(line.contains("ranks")) << step;
        EXPECT_EQ(line["stragglers"], json::array({1}));
        EXPECT_EQ(line["ranks"][1], rank_figures_json(r[1], 1));
        EXPECT_DOUBLE_EQ(line["ranks"][1]["compute_s"].get<double>(), 0.4);  // 0.5 - 0 - 0.1
    }
}

TEST(Monitor, ConfigSections) {
    ParsedConfig p = parse_config(json::parse(R"({
        "tensorboard": {"enabled": true, "output_path": "/tmp/tb", "job_name": "run1"},
        "csv_monitor": {"enabled": true},
        "monitor": {"straggler_factor": 2, "gemm_ceiling_flops": 1e12,
                    "prometheus": {"port": 9400, "colour": "red"}}
    })"));
    const MonitorConfig& m = p.config.monitor;
    EXPECT_TRUE(m.tensorboard.enabled);
    EXPECT_EQ(m.tensorboard.output_path, "/tmp/tb");
    EXPECT_EQ(m.tensorboard.job_name, "run1");
    EXPECT_TRUE(m.csv.enabled);
    EXPECT_EQ(m.csv.job_name, "zerotrain");
    EXPECT_EQ(m.straggler_factor, 2.0);
    EXPECT_EQ(m.gemm_ceiling_flops, 1e12);
    EXPECT_EQ(m.prometheus_port, 9400);
    EXPECT_EQ(m.prometheus_address, "127.0.0.1");
    ASSERT_EQ(p.warnings.size(), 1u);
    EXPECT_EQ(p.warnings[0], "monitor.prometheus.colour: unknown key, ignored");
    EXPECT_EQ(parse_config(json::object()).config.monitor.prometheus_port, -1);

    auto error_of = [](const json& j) {
        try {
            parse_config(j);
        } catch (const Error& e) {
            return e.message();
        }
        return std::string("no error");
    };
    EXPECT_NE(error_of({{"monitor", {{"prometheus", {{"address", "127.0.0.1"}}}}}})
                  .find("monitor.prometheus.port"),
              std::string::npos);
    EXPECT_NE(error_of({{"monitor", {{"prometheus", {{"port", 70000}}}}}})
                  .find("monitor.prometheus.port"),
              std::string::npos);
    EXPECT_NE(error_of({{"monitor", {{"prometheus", {{"port", 1}, {"address", "localhost"}}}}}})
                  .find("monitor.prometheus.address"),
              std::string::npos);
    EXPECT_NE(error_of({{"tensorboard", {{"enabled", "yes"}}}}).find("tensorboard.enabled"),
              std::string::npos);
    EXPECT_NE(error_of({{"monitor", {{"gemm_ceiling_file", "/nonexistent/gemm.json"}}}})
                  .find("zerotrain bench gemm --json"),
              std::string::npos);

    // The bench file: its bf16 ceiling for bf16 training, f32 otherwise (GFLOP/s to FLOP/s).
    const fs::path dir = fresh_dir("cfg");
    const std::string file = (dir / "gemm.json").string();
    std::ofstream(file) << R"({"ceiling_gflops": {"f32": 250.5, "bf16": 900}})";
    EXPECT_EQ(parse_config({{"monitor", {{"gemm_ceiling_file", file}}}})
                  .config.monitor.gemm_ceiling_flops,
              250.5e9);
    EXPECT_EQ(parse_config({{"bf16", {{"enabled", true}}},
                            {"monitor", {{"gemm_ceiling_file", file}}}})
                  .config.monitor.gemm_ceiling_flops,
              900e9);
    fs::remove_all(dir);
}

}  // namespace
}  // namespace zt
