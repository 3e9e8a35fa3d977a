// Report details (issue 12): sizes formatted without exponents, and the Restarts table with each
// restart's resumed_from and recovery_s (docs/launch.md's restarts.jsonl).
#include <gtest/gtest.h>

#include <sstream>

#include "runtime/report/report_tables.h"
#include "runtime/report/run_log.h"
#include "runtime/report/svg_plot.h"

namespace zt::report {
namespace {

TEST(ReportDetails, SizesWithoutExponents) {
    EXPECT_EQ(tick_label(1000 * 1024.0, true), "1000 KiB");
    EXPECT_EQ(tick_label(1023.9 * 1024, true), "1024 KiB");
    EXPECT_EQ(tick_label(999.7, true), "1000 B");
    EXPECT_EQ(tick_label(999.7e6, false), "1000M");
    EXPECT_EQ(tick_label(512 * 1024.0, true), "512 KiB");
    EXPECT_EQ(tick_label(1.5 * 1024 * 1024, true), "1.5 MiB");
    EXPECT_EQ(tick_label(12.3 * 1024, true), "12.3 KiB");
    for (double v = 1; v < 1e15; v *= 1.37)
        for (bool bytes : {true, false})
            EXPECT_EQ(tick_label(v, bytes).find('e'), std::string::npos) << v;
}

TEST(ReportDetails, SummaryPeakMemoryReadable) {
    RunLog log;
    StepRecord r{};
    r.step = 1;
    r.loss = 1;
    r.tokens_per_s = 1;
    r.mem["peak"] = 1000 * 1024;
    log.steps.push_back(r);
    const std::string html = summary_table(log);
    EXPECT_NE(html.find("<td>1000 KiB</td>"), std::string::npos) << html;
    EXPECT_EQ(html.find("e+"), std::string::npos) << html;
}

TEST(ReportDetails, RestartsTableShowsResumedFromAndRecovery) {
    std::istringstream in(
        "{\"time\":\"2026-01-01T00:00:00Z\",\"attempt\":1,\"cause\":\"rank 1 exited 137\","
        "\"resumed_from\":50,\"recovery_s\":3.25}\n"
        "{\"time\":\"2026-01-01T00:01:00Z\",\"attempt\":2,\"cause\":\"rank 0 exited 1\","
        "\"resumed_from\":null,\"recovery_s\":null}\n");
    const std::vector<RestartRecord> rs = parse_restarts(in, nullptr);
    ASSERT_EQ(rs.size(), 2u);
    EXPECT_EQ(rs[0].resumed_from, "50");
    EXPECT_EQ(rs[0].recovery_s, "3.25");
    EXPECT_EQ(rs[1].resumed_from, "-");
    EXPECT_EQ(rs[1].recovery_s, "-");
    const std::string html = restarts_section(rs);
    EXPECT_NE(html.find("<th>resumed from step</th><th>recovery (s)</th>"), std::string::npos)
        << html;
    EXPECT_NE(html.find("<td>rank 1 exited 137</td><td>50</td><td>3.25</td>"), std::string::npos)
        << html;
    EXPECT_NE(html.find("<td>rank 0 exited 1</td><td>-</td><td>-</td>"), std::string::npos) << html;
}

}  // namespace
}  // namespace zt::report
