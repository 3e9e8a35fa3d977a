// The report's reading of run directories and timelines (odd lines tolerated, errors shown) and
// its page: every plot present, with data, and the tables.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "runtime/report/html_report.h"
#include "runtime/report/run_log.h"
#include "runtime/report/svg_plot.h"
#include "util/error.h"

namespace zt::report {
namespace {

namespace fs = std::filesystem;

// Three steps on two ranks, an eval line, then a failure.
const char* kMetrics =
    R"({"step":1,"loss":4.2,"lr":0.001,"grad_norm":1.5,"step_time_s":0.02,"tokens_per_s":1000,)"
    R"("mfu_flops_per_s":2e9,"mfu":0.25,"comm_s":0.005,"skipped":false,"mem":{"params":1024,"grads":1024,)"
    R"("optimizer":2048,"activations":0,"comm":0,"workspace":0,"peak":8192,"reserved":9000,)"
    R"("fragmentation":100},"comm":{"all_reduce":{"count":2,"bytes":4096,"seconds":0.004}}})"
    "\n"
    R"({"step":2,"loss":4.1,"lr":0.001,"step_time_s":0.01,"tokens_per_s":2000,"comm_s":0.004,)"
    R"("mem":{"params":1024,"grads":1024,"optimizer":2048,"peak":8192},)"
    R"("comm":{"all_reduce":{"count":2,"bytes":4096,"seconds":0.002}},)"
    R"("ranks":[{"rank":0,"comm_s":0.004,"mem":{"params":1024,"peak":8000}},)"
    R"({"rank":1,"comm_s":0.001,"step_s":0.01,"compute_s":0.007,"io_s":0.002,)"
    R"("mem":{"params":1024,"peak":7000}}],"stragglers":[1]})"
    "\n"
    "{\"step\":2,\"eval_loss\":4.3}\n"
    "\n"
    "{\"step\":3,\"loss\":\"oops\",\"lr\":0.001}\n"
    "{\"step\":4,\"loss\":4.0,\"lr\":0.0\n"  // cut short by a crash
    "[1,2]\n"
    "{\"error\":\"out of memory: <details> & more\",\"step\":3}\n";

TEST(RunLog, ToleratesOddLinesAndKeepsErrors) {
    std::istringstream in(kMetrics);
    RunLog log = parse_metrics(in);
    ASSERT_EQ(log.steps.size(), 3u);
    EXPECT_EQ(log.steps[0].step, 1);
    EXPECT_DOUBLE_EQ(log.steps[0].loss, 4.2);
    EXPECT_EQ(log.steps[0].mem.at("optimizer"), 2048);
    EXPECT_EQ(log.steps[0].comm.at("all_reduce").bytes, 4096);
    EXPECT_TRUE(std::isnan(log.steps[1].grad_norm));  // absent
    EXPECT_TRUE(std::isnan(log.steps[2].loss));       // not a number
    ASSERT_EQ(log.steps[1].ranks.size(), 2u);
    EXPECT_DOUBLE_EQ(log.steps[1].ranks[1].comm_s, 0.001);
    EXPECT_DOUBLE_EQ(log.steps[1].ranks[1].compute_s, 0.007);
    EXPECT_TRUE(std::isnan(log.steps[1].ranks[0].compute_s));  // an older line's rank
    EXPECT_EQ(log.steps[1].stragglers, std::vector<int64_t>{1});
    EXPECT_DOUBLE_EQ(log.steps[0].mfu, 0.25);
    ASSERT_EQ(log.evals.size(), 1u);
    EXPECT_DOUBLE_EQ(log.evals[0].eval_loss, 4.3);
    ASSERT_EQ(log.errors.size(), 1u);
    EXPECT_EQ(log.errors[0].step, 3);
    ASSERT_EQ(log.problems.size(), 2u);  // the cut line and the array
    EXPECT_EQ(log.problems[0].line, 6);
    EXPECT_EQ(log.problems[1].line, 7);
}

TEST(RunLog, RestartsReadWhateverTheTypes) {
    std::istringstream in(
        "{\"time\":\"2026-01-01T00:00:00Z\",\"attempt\":1,\"cause\":\"rank 1 exited 137\"}\n"
        "garbage\n{\"time\":1767225600.5,\"attempt\":2}\n");
    std::vector<LogProblem> problems;
    auto r = parse_restarts(in, &problems);
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0].attempt, "1");
    EXPECT_EQ(r[0].cause, "rank 1 exited 137");
    EXPECT_EQ(r[1].time, "1767225600.5");
    EXPECT_EQ(r[1].cause, "");
    ASSERT_EQ(problems.size(), 1u);
    EXPECT_EQ(problems[0].line, 2);
}

class RunDir : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("zt_report_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    void write(const std::string& name, const std::string& text) {
        std::ofstream(dir_ / name) << text;
    }
    fs::path dir_;
};

TEST_F(RunDir, PageHoldsEveryPlotWithDataAndTheTables) {
    write("metrics.jsonl", kMetrics);
    write("config.json",
          R"({"train_micro_batch_size_per_gpu":2,"steps":3,"model":{"type":"gpt","vocab_size":64,)"
          R"("seq_len":16,"d_model":16,"n_layers":1,"n_heads":2},"comm":{"backend":"local",)"
          R"("local_ranks":2}})");
    write("restarts.jsonl", "{\"time\":\"t1\",\"attempt\":1,\"cause\":\"rank 1 killed <9>\"}\n");
    const std::string html = render_run_report(read_run_dir(dir_.string()));
    for (const std::string& id : run_report_plot_ids()) {
        const size_t at = html.find("id=\"" + id + "\"");
        ASSERT_NE(at, std::string::npos) << id;
        const size_t end = html.find("</svg>", at);
        const std::string svg = html.substr(at, end - at);
        EXPECT_EQ(svg.find("no data"), std::string::npos) << id;
        EXPECT_TRUE(svg.find("<polyline points=\"") != std::string::npos ||
                    svg.find("<polygon") != std::string::npos ||
                    svg.find("<rect x=") != std::string::npos)
            << id;
    }
    // The error, escaped; the restart and its cause; the config; the plan; the skipped lines.
    EXPECT_NE(html.find("out of memory: &lt;details&gt; &amp; more"), std::string::npos);
    EXPECT_NE(html.find("rank 1 killed &lt;9&gt;"), std::string::npos);
    EXPECT_NE(html.find("model.d_model"), std::string::npos);
    EXPECT_NE(html.find("rank 1 (1 lines)"), std::string::npos);  // the straggler
    EXPECT_NE(html.find("MFU (model FLOP/s over the GEMM ceiling)"), std::string::npos);
    EXPECT_NE(html.find("id=\"table-plan\""), std::string::npos);
    EXPECT_NE(html.find("id=\"table-problems\""), std::string::npos);
    EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));  // nothing fetched
    EXPECT_EQ(html.find("https://"), std::string::npos);
}

TEST_F(RunDir, ClickModelPlotsAucAndDistinctIdsPerTable) {
    // A DLRM run's lines: samples/s instead of tokens/s, distinct ids per table, AUC at eval.
    write("metrics.jsonl",
          "{\"step\":1,\"loss\":0.7,\"lr\":0.1,\"samples_per_s\":1000,"
          "\"data\":{\"unique_ids\":[5,3]}}\n"
          "{\"step\":2,\"loss\":0.6,\"lr\":0.1,\"samples_per_s\":3000,"
          "\"data\":{\"unique_ids\":[6,2]}}\n"
          "{\"step\":2,\"eval_loss\":0.55,\"eval_auc\":0.71,\"eval_log_loss\":0.55}\n"
          "{\"step\":3,\"loss\":0.5,\"lr\":0.1,\"samples_per_s\":5000,"
          "\"data\":{\"unique_ids\":[7,3]},\"embedding\":{\"alltoall_bytes\":4096,"
          "\"alltoall_s\":0.002,\"rows_touched\":{\"emb_l.0.weight\":9,\"emb_l.1.weight\":4}}}\n"
          "{\"step\":3,\"eval_loss\":0.5,\"eval_auc\":0.74,\"eval_log_loss\":0.5}\n");
    const RunDirContents run = read_run_dir(dir_.string());
    ASSERT_EQ(run.log.evals.size(), 2u);
    EXPECT_DOUBLE_EQ(run.log.evals[1].extra.at("eval_auc"), 0.74);
    EXPECT_TRUE(run.log.samples);
    EXPECT_EQ(run.log.steps[2].unique_ids, (std::vector<double>{7, 3}));
    EXPECT_EQ(run.log.steps[2].table_rows.at("emb_l.0.weight"), 9);
    EXPECT_EQ(run.log.steps[2].alltoall_bytes, 4096);
    EXPECT_TRUE(std::isnan(run.log.steps[0].alltoall_bytes));
    const std::string html = render_run_report(run);
    for (const char* id : {"plot-auc", "plot-unique-ids", "plot-rows-touched",
                           "plot-alltoall-bytes", "plot-alltoall-s"}) {
        const size_t at = html.find(std::string("id=\"") + id + "\"");
        ASSERT_NE(at, std::string::npos) << id;
        const std::string svg = html.substr(at, html.find("</svg>", at) - at);
        EXPECT_NE(svg.find("<polyline points=\""), std::string::npos) << id;
    }
    EXPECT_NE(html.find("table 1"), std::string::npos);  // one line per table, named
    EXPECT_NE(html.find("emb_l.1.weight"), std::string::npos);
    EXPECT_NE(html.find("mean samples/s (after the first step)"), std::string::npos);
    EXPECT_EQ(html.find("tokens/s"), std::string::npos);
}

TEST_F(RunDir, MissingPiecesAreSaidNotFatal) {
    write("metrics.jsonl", "{\"error\":\"config: bad\",\"step\":0}\n");
    const std::string html = render_run_report(read_run_dir(dir_.string()));
    EXPECT_NE(html.find("config: bad"), std::string::npos);
    EXPECT_NE(html.find("no config.json"), std::string::npos);
    EXPECT_NE(html.find("not supervised"), std::string::npos);
    EXPECT_NE(html.find("no data"), std::string::npos);
    EXPECT_THROW(read_run_dir((dir_ / "nothing").string()), Error);
}

TEST_F(RunDir, TimelineDrawsLiveBytesPerCategory) {
    write("tl.jsonl",
          R"({"categories":["params","grads","optimizer","activations","comm","workspace"],)"
          R"("memory_timeline":1,"ops":{},"phases":[],"rank":0})"
          "\n{\"module_id\":1,\"name\":\"m\"}\n"
          "{\"t\":0.1,\"op\":\"a\",\"b\":4096,\"c\":0,\"m\":0,\"p\":4}\n"
          "{\"t\":0.2,\"op\":\"a\",\"b\":8192,\"c\":3,\"m\":1,\"p\":0}\n"
          "{\"t\":0.3,\"op\":\"oom\",\"b\":999999,\"c\":3,\"m\":1,\"p\":0}\n"
          "{\"t\":0.3,\"op\":\"f\",\"b\":8192,\"c\":3,\"m\":1,\"p\":1}\n"
          "{\"t\":\"x\",\"op\":\"a\",\"b\":1,\"c\":0}\n"
          "{\"t\":0.4,\"op\":\"a\",\"b\":64,\"c\":\n");
    const std::string html = render_timeline_report((dir_ / "tl.jsonl").string());
    EXPECT_NE(html.find("id=\"plot-timeline\""), std::string::npos);
    EXPECT_NE(html.find("<polygon"), std::string::npos);
    EXPECT_NE(html.find("id=\"table-oom\""), std::string::npos);
    EXPECT_NE(html.find("8 KiB"), std::string::npos);  // activations' peak
    EXPECT_NE(html.find("id=\"table-problems\""), std::string::npos);
    write("not.jsonl", "{\"step\":1,\"loss\":2}\n");
    EXPECT_THROW(render_timeline_report((dir_ / "not.jsonl").string()), Error);
}

TEST(SvgPlot, EmptyAndDegenerateInputs) {
    PlotOptions o;
    o.id = "p";
    EXPECT_NE(svg_line_plot({}, o).find("no data"), std::string::npos);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    EXPECT_NE(svg_line_plot({{"a", {1, 2}, {nan, nan}}}, o).find("no data"), std::string::npos);
    const std::string one = svg_line_plot({{"a", {1}, {5}}}, o);  // one point: a marker
    EXPECT_NE(one.find("<circle"), std::string::npos);
    EXPECT_EQ(one.find("nan"), std::string::npos);
    EXPECT_NE(svg_bar_chart({"x"}, {"s"}, {{0}}, o).find("no data"), std::string::npos);
    EXPECT_EQ(html_escape("<a href='x'>&\""), "&lt;a href=&#39;x&#39;&gt;&amp;&quot;");
    EXPECT_EQ(tick_label(1536, true), "1.5 KiB");
    EXPECT_EQ(tick_label(2500000, false), "2.5M");
}

// The plan field (docs/planner.md) drawn: measured step time and peak against the planner's
// predictions, as two series each; a log without it draws neither plot.
TEST_F(RunDir, PlanFieldIsDrawnAgainstTheMeasurement) {
    write("metrics.jsonl", R"({"step":1,"step_time_s":0.5,"mem":{"peak":1000},)"
                           R"("plan":{"step_s":{"predicted":0.4,"measured":0.5,"ratio":1.25},)"
                           R"("peak_bytes":{"predicted":1100,"measured":1000,"ratio":0.909}}})"
                           "\n"
                           R"({"step":2,"step_time_s":0.42,"mem":{"peak":1000},)"
                           R"("plan":{"step_s":{"predicted":0.4,"measured":0.42,"ratio":1.05},)"
                           R"("peak_bytes":{"predicted":1100,"measured":1000,"ratio":0.909}}})"
                           "\n");
    const RunDirContents run = read_run_dir(dir_.string());
    ASSERT_EQ(run.log.steps.size(), 2u);
    EXPECT_DOUBLE_EQ(run.log.steps[1].plan_step_s, 0.4);
    EXPECT_DOUBLE_EQ(run.log.steps[1].plan_peak_bytes, 1100);
    const std::string html = render_run_report(run);
    for (const char* id : {"plot-plan-step", "plot-plan-peak"}) {
        const size_t at = html.find(std::string("id=\"") + id + "\"");
        ASSERT_NE(at, std::string::npos) << id;
        const std::string svg = html.substr(at, html.find("</svg>", at) - at);
        EXPECT_NE(svg.find("predicted"), std::string::npos) << id;
        EXPECT_NE(svg.find("measured"), std::string::npos) << id;
        EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos) << id;  // the prediction
        size_t lines = 0;
        for (size_t p = svg.find("<polyline"); p != std::string::npos;
             p = svg.find("<polyline", p + 1))
            ++lines;
        EXPECT_EQ(lines, 3u) << id;  // the axes, the measurement and the prediction
    }
    write("metrics.jsonl", R"({"step":1,"step_time_s":0.5,"mem":{"peak":1000}})"
                           "\n");
    const std::string none = render_run_report(read_run_dir(dir_.string()));
    EXPECT_EQ(none.find("plot-plan-step"), std::string::npos);
    EXPECT_EQ(none.find("plot-plan-peak"), std::string::npos);
}

}  // namespace
}  // namespace zt::report
