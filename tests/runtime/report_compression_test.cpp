// The report's "Compressed communication" section (runtime/report/compression_report.h): every
// channel's entry read from the metrics (compression.*, embedding and pipeline comm_compression,
// comm_cross_host_bytes), summed and shown per channel; no section for an uncompressed run.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "runtime/report/compression_report.h"
#include "runtime/report/html_report.h"
#include "runtime/report/run_log.h"
#include "runtime/report/svg_plot.h"

namespace zt::report {
namespace {

// Three steps with every channel; 1-bit Adam's momentum sends nothing in its warm-up step.
const char* kCompressed =
    R"({"step":1,"loss":4.2,"compression":{"gradients":{"codec":"int8","error_feedback":false,)"
    R"("raw_bytes":4096,"wire_bytes":1040,"ratio":3.94,"relative_error":0.01},)"
    R"("weights":{"codec":"int8","error_feedback":false,"raw_bytes":2048,"wire_bytes":520,)"
    R"("ratio":3.94,"relative_error":0.004},"momentum":{"codec":"onebit","phase":"warmup",)"
    R"("error_feedback":true,"raw_bytes":0,"wire_bytes":0}},)"
    R"("embedding":{"alltoall_bytes":400,"comm_compression":{"forward":"fp16","backward":"bf16",)"
    R"("raw_bytes":800,"wire_bytes":400,"ratio":2,"relative_error":0.001}},)"
    R"("pipeline":{"bubble":0.2,"comm_compression":{"forward":"int8","backward":"bf16",)"
    R"("raw_bytes":1000,"wire_bytes":300,"ratio":3.33,"relative_error":0.02}},)"
    R"("comm_cross_host_bytes":3000})"
    "\n"
    R"({"step":2,"loss":4.1,"compression":{"gradients":{"codec":"int8","error_feedback":false,)"
    R"("raw_bytes":4096,"wire_bytes":1040,"ratio":3.94,"relative_error":0.03},)"
    R"("momentum":{"codec":"onebit","phase":"compressed","error_feedback":true,)"
    R"("raw_bytes":3200,"wire_bytes":100,"ratio":32,"relative_error":0.5}},)"
    R"("comm_cross_host_bytes":1000})"
    "\n"
    R"({"step":3,"loss":4.0,"compression":{"gradients":{"codec":"int8","error_feedback":false,)"
    R"("raw_bytes":4096,"wire_bytes":1040,"ratio":3.94,"relative_error":0.02}}})"
    "\n";

RunLog parse(const char* text) {
    std::istringstream in(text);
    return parse_metrics(in);
}

TEST(ReportCompression, ReadsEveryChannel) {
    const RunLog log = parse(kCompressed);
    ASSERT_EQ(log.steps.size(), 3u);
    const StepRecord& s = log.steps[0];
    ASSERT_EQ(s.compression.size(), 5u);
    EXPECT_EQ(s.compression.at("gradients").codec, "int8");
    EXPECT_EQ(s.compression.at("gradients").wire_bytes, 1040);
    EXPECT_EQ(s.compression.at("momentum").codec, "onebit, error feedback (warmup)");
    EXPECT_TRUE(std::isnan(s.compression.at("momentum").relative_error));
    EXPECT_EQ(s.compression.at("embedding").codec, "forward fp16, backward bf16");
    EXPECT_EQ(s.compression.at("embedding").raw_bytes, 800);
    EXPECT_EQ(s.compression.at("pipeline").relative_error, 0.02);
    EXPECT_EQ(s.cross_host_bytes, 3000);
    EXPECT_TRUE(std::isnan(log.steps[2].cross_host_bytes));
}

TEST(ReportCompression, SummarizesPerChannel) {
    const std::vector<CompressionSummary> sum = compression_summary(parse(kCompressed));
    ASSERT_EQ(sum.size(), 5u);
    const char* order[] = {"gradients", "momentum", "weights", "embedding", "pipeline"};
    for (size_t i = 0; i < sum.size(); ++i) EXPECT_EQ(sum[i].channel, order[i]);
    const CompressionSummary& g = sum[0];
    EXPECT_EQ(g.steps, 3);
    EXPECT_EQ(g.raw_per_step, 4096);
    EXPECT_EQ(g.wire_per_step, 1040);
    EXPECT_DOUBLE_EQ(g.ratio, 4096.0 / 1040);
    EXPECT_DOUBLE_EQ(g.error_median, 0.02);  // of 0.01, 0.03, 0.02
    EXPECT_DOUBLE_EQ(g.error_last, 0.02);
    const CompressionSummary& m = sum[1];  // the totals' ratio, the warm-up step included
    EXPECT_EQ(m.steps, 2);
    EXPECT_EQ(m.codec, "onebit, error feedback (compressed)");
    EXPECT_DOUBLE_EQ(m.raw_per_step, 1600);
    EXPECT_DOUBLE_EQ(m.ratio, 32);
    EXPECT_DOUBLE_EQ(m.error_median, 0.5);
    EXPECT_EQ(sum[2].steps, 1);
    EXPECT_DOUBLE_EQ(sum[3].ratio, 2);
}

TEST(ReportCompression, PageShowsTheSectionOnlyWhenSomethingWasCompressed) {
    RunDirContents run;
    run.dir = "run";
    run.log = parse(kCompressed);
    const std::string html = render_run_report(run);
    EXPECT_NE(html.find("<h2>Compressed communication</h2>"), std::string::npos);
    const size_t table = html.find("id=\"table-compression\"");
    ASSERT_NE(table, std::string::npos);
    EXPECT_NE(html.find("<td>gradient reductions (compression.gradients)</td><td>int8</td>"
                        "<td>rank 0</td><td>3</td><td>" +
                            tick_label(4096, true) + "</td><td>" + tick_label(1040, true) +
                            "</td><td>3.938</td><td>0.02</td><td>0.02</td>",
                        table),
              std::string::npos)
        << html.substr(table, 3000);
    EXPECT_NE(html.find("<td>ZeRO-3 weight gathers (zero_quantized_weights)</td>", table),
              std::string::npos);
    EXPECT_NE(html.find("<td>forward fp16, backward bf16</td><td>all ranks</td>", table),
              std::string::npos);
    EXPECT_NE(html.find("id=\"table-cross-host\""), std::string::npos);
    EXPECT_NE(html.find("<td>mean per step</td><td>" + tick_label(2000, true) + "</td>"),
              std::string::npos);
    for (const char* id : {"plot-compression-wire", "plot-compression-error"}) {
        const size_t at = html.find(std::string("id=\"") + id + "\"");
        ASSERT_NE(at, std::string::npos) << id;
        const std::string svg = html.substr(at, html.find("</svg>", at) - at);
        EXPECT_EQ(svg.find("no data"), std::string::npos) << id;
        EXPECT_NE(svg.find("<polyline points=\""), std::string::npos) << id;
    }

    RunDirContents plain;
    plain.dir = "plain";
    plain.log = parse(R"({"step":1,"loss":4.2,"comm":{"all_reduce":{"count":2,"bytes":4096}}})"
                      "\n");
    EXPECT_EQ(compression_section(plain.log), "");
    // One rank: the entry is written but nothing went through the codec.
    EXPECT_EQ(compression_section(parse(R"({"step":1,"loss":4.2,"compression":{"gradients":)"
                                        R"({"codec":"int8","raw_bytes":0,"wire_bytes":0}}})"
                                        "\n")),
              "");
    const std::string page = render_run_report(plain);
    EXPECT_EQ(page.find("Compressed communication"), std::string::npos);
    EXPECT_EQ(page.find("plot-compression"), std::string::npos);
}

}  // namespace
}  // namespace zt::report
