// `zerotrain report RUN_DIR [--out F]` and `zerotrain report --memory-timeline FILE [--out F]`:
// one self-contained HTML page (runtime/report/). Written to a temporary name and renamed, so a
// reader never sees half a page.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "runtime/report/html_report.h"
#include "util/error.h"

namespace zt::cli {

namespace {

void write_page(const std::string& path, const std::string& html) {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary);
        out << html;
        ZT_CHECK(out.good(), "report: cannot write ", tmp);
    }
    std::filesystem::rename(tmp, path);
}

}  // namespace

void Commands::add_report(CLI::App& app) {
    CLI::App* sub = app.add_subcommand(
        "report",
        "one self-contained HTML page of a run (plots and tables) or of a memory timeline");
    ReportArgs& a = report_;
    sub->add_option("run_dir", a.run_dir, "a run directory (holds metrics.jsonl)");
    sub->add_option("--memory-timeline", a.memory_timeline,
                    "draw a memory timeline file (train --memory-timeline) instead");
    sub->add_option("--out", a.out,
                    "the HTML file (default RUN_DIR/report.html, or FILE.html for a timeline)");
    runners_.emplace_back(sub, [&a] {
        ZT_CHECK(a.run_dir.empty() != a.memory_timeline.empty(),
                 "report: give a run directory or --memory-timeline FILE (one of them), got ",
                 a.run_dir.empty() ? "neither" : "both");
        std::string html, out = a.out;
        if (!a.memory_timeline.empty()) {
            html = report::render_timeline_report(a.memory_timeline);
            if (out.empty()) out = a.memory_timeline + ".html";
        } else {
            html = report::render_run_report(report::read_run_dir(a.run_dir));
            if (out.empty()) out = a.run_dir + "/report.html";
        }
        write_page(out, html);
        std::fprintf(stderr, "wrote %s\n", out.c_str());
        return 0;
    });
}

}  // namespace zt::cli
