// `zerotrain report` end to end: a two-rank run with the profilers on writes config.json and the
// profilers' output; its report opens in headless Chromium without console messages, and a
// screenshot shows data pixels inside every plot (tests/python/check_report_png.py). Skipped when
// chromium (Debian's package) or Pillow is missing.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "cli/cli_fixture.h"
#include "reader_required.h"
#include "runtime/report/html_report.h"

namespace zt::testing {
namespace {

bool have(const std::string& cmd) { return run_command(cmd + " >/dev/null 2>&1").code == 0; }

// Chromium headless on a file, with its own profile directory (tests may run at once).
CommandResult chromium(const fs::path& dir, const std::string& args, const fs::path& page) {
    return run_command(
        "timeout 120 chromium --headless --disable-gpu --no-sandbox "
        "--hide-scrollbars --force-device-scale-factor=1 --window-size=1200,4000 "
        "--user-data-dir=" +
        (dir / "chromium-profile").string() + " --enable-logging=stderr --v=0 " + args +
        " file://" + page.string());
}

class Report : public Cli {
  protected:
    // A short two-rank run with evaluation, the FLOPs profiler and the comms logger.
    fs::path train_run() {
        nlohmann::json c = tiny();
        c["steps"] = 4;
        c["steps_per_print"] = 2;
        c["flops_profiler"] = {{"enabled", true}, {"profile_step", 2}};
        c["comms_logger"] = {{"enabled", true}};
        const fs::path run = dir_ / "run";
        const CommandResult r =
            run_zerotrain("train " + write_config(c) + " --ranks 2 --run-dir " + run.string() +
                          " --memory-timeline " + (dir_ / "mem.jsonl").string());
        EXPECT_EQ(r.code, 0) << r.output;
        train_output_ = r.output;
        return run;
    }
    std::string train_output_;
};

TEST_F(Report, TrainSavesConfigAndPrintsProfilers) {
    const fs::path run = train_run();
    std::ifstream cf(run / "config.json");
    ASSERT_TRUE(cf.good());
    nlohmann::json saved = nlohmann::json::parse(cf);
    EXPECT_EQ(saved["model"]["d_model"], 16);
    EXPECT_EQ(saved["comm"]["local_ranks"], 2);  // --ranks, as the run resolved it
    EXPECT_NE(train_output_.find("zerotrain flops profiler"), std::string::npos) << train_output_;
    EXPECT_NE(train_output_.find("profile step:                   2"), std::string::npos);
    EXPECT_NE(train_output_.find("transformer.h.0.attn.c_attn (ColumnParallelLinear)"),
              std::string::npos);
    EXPECT_NE(train_output_.find("comms logger, rank 0, total through step 2"), std::string::npos);
    EXPECT_NE(train_output_.find("all_reduce"), std::string::npos);
    EXPECT_NE(train_output_.find("total at the end of training"), std::string::npos);
}

TEST_F(Report, OpensInChromiumWithEveryPlotDrawn) {
    const fs::path run = train_run();
    std::ofstream(run / "restarts.jsonl")
        << "{\"time\":\"2026-01-01T00:00:00Z\",\"attempt\":1,\"cause\":\"rank 1 exited 137\"}\n";
    CommandResult r = run_zerotrain("report " + run.string());
    ASSERT_EQ(r.code, 0) << r.output;
    const fs::path page = run / "report.html";
    ASSERT_TRUE(fs::exists(page));
    r = run_zerotrain("report --memory-timeline " + (dir_ / "mem.jsonl.rank0").string() +
                      " --out " + (dir_ / "tl.html").string());
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(run_zerotrain("report").code, 0);  // neither a run nor a timeline
    EXPECT_EQ(run_zerotrain("report " + (dir_ / "none").string()).code, 2);

    if (!have("chromium --version"))
        ZT_READER_MISSING("chromium is not installed (scripts/setup.sh)");
    if (!have("/usr/bin/python3 -c 'import PIL'"))
        ZT_READER_MISSING("python3-pil is not installed");
    const std::string checker = std::string(ZT_SOURCE_DIR) + "/tests/python/check_report_png.py";
    // Every run's plots, and the plan field's (docs/planner.md) where the run's lines carry it.
    std::vector<std::string> run_ids = report::run_report_plot_ids();
    {
        std::ifstream in(page);
        const std::string text((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
        for (const char* id : {"plot-plan-step", "plot-plan-peak"})
            if (text.find(std::string("id=\"") + id + "\"") != std::string::npos)
                run_ids.push_back(id);
    }
    for (const auto& [html, ids] : std::vector<std::pair<fs::path, std::vector<std::string>>>{
             {page, run_ids}, {dir_ / "tl.html", {"plot-timeline"}}}) {
        const fs::path png = dir_ / "shot.png", dom = dir_ / "dom.html";
        CommandResult shot = chromium(dir_, "--screenshot=" + png.string(), html);
        ASSERT_TRUE(fs::exists(png)) << shot.output;
        // Any console message (an exception, a blocked fetch) is a failure: the page logs none.
        EXPECT_EQ(shot.output.find(":CONSOLE"), std::string::npos) << shot.output;
        CommandResult d = chromium(dir_, "--dump-dom", html);
        EXPECT_EQ(d.output.find(":CONSOLE"), std::string::npos) << d.output;
        std::ofstream(dom) << d.output;
        // The inline script ran to its end and saw every plot.
        EXPECT_NE(d.output.find("data-ready=\"" + std::to_string(ids.size()) + "\""),
                  std::string::npos);
        CommandResult px =
            run_command("/usr/bin/python3 " + checker + " " + png.string() + " " + dom.string());
        ASSERT_EQ(px.code, 0) << px.output;
        std::map<std::string, long> counts;
        std::istringstream lines(px.output);
        for (std::string line; std::getline(lines, line);) {
            std::istringstream words(line);
            std::string id;
            long n = 0;
            if (words >> id >> n && id != "size") counts[id] = n;
        }
        for (const std::string& want : ids) {
            ASSERT_TRUE(counts.count(want)) << want << " has no box in the DOM\n" << px.output;
            // A drawn series covers hundreds of pixels (a 2-pixel line across ~470 pixels, or
            // bars); an empty plot has none below its legend.
            EXPECT_GT(counts[want], 300) << want << "\n" << px.output;
        }
        fs::remove(png);
    }
}

}  // namespace
}  // namespace zt::testing
