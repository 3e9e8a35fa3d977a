// `zerotrain report --memory-timeline FILE`: live bytes per category over time from a memory
// timeline (docs/memory-timeline.md). Long files are thinned to about kMaxPoints points, each
// the highest total of its run of events, so peaks survive the thinning.
#include <algorithm>
#include <array>
#include <fstream>

#include "runtime/report/html_report.h"
#include "runtime/report/report_tables.h"
#include "runtime/report/svg_plot.h"
#include "util/error.h"

namespace zt::report {

namespace {

constexpr size_t kMaxPoints = 2000;

struct Point {
    double t;
    std::vector<int64_t> live;  // per category
    int64_t total;
};

}  // namespace

std::string render_timeline_report(const std::string& path) {
    std::ifstream in(path);
    ZT_CHECK(in.good(), "report: cannot read memory timeline ", path);
    std::vector<std::string> cats;
    std::vector<int64_t> live, peak;
    std::vector<Point> points;
    std::vector<LogProblem> problems;
    std::vector<std::vector<std::string>> refused;
    int64_t rank = 0, events = 0, n = 0;
    std::string line;
    while (std::getline(in, line)) {
        ++n;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object()) {
            problems.push_back({path, n, "not a JSON object (a line cut short?)"});
            continue;
        }
        try {
            if (j.contains("memory_timeline")) {
                ZT_CHECK(j.contains("categories") && j["categories"].is_array(), "report: ", path,
                         " line ", n, ": a memory timeline header without categories");
                for (const auto& c : j["categories"])
                    cats.push_back(c.is_string() ? c.get<std::string>() : c.dump());
                live.assign(cats.size(), 0);
                peak.assign(cats.size(), 0);
                rank = j.value("rank", int64_t{0});
                continue;
            }
            ZT_CHECK(!cats.empty(), "report: ", path,
                     " is not a memory timeline (its first line is not the header with "
                     "\"memory_timeline\"); write one with zerotrain train --memory-timeline FILE");
            if (j.contains("module_id")) continue;
            const std::string op = j.value("op", std::string());
            const int64_t c = j.value("c", int64_t{-1});
            if (c < 0 || static_cast<size_t>(c) >= cats.size() || !j.contains("b")) {
                problems.push_back({path, n, "an event without a known category or bytes"});
                continue;
            }
            const auto ci = static_cast<size_t>(c);
            const int64_t b = j.value("b", int64_t{0});
            const double t = j.value("t", 0.0);
            if (op == "oom") {
                refused.push_back({str_cat(t), cats[ci], tick_label(static_cast<double>(b), true)});
                continue;
            }
            if (op != "a" && op != "f") {
                problems.push_back({path, n, "unknown op \"" + op + "\""});
                continue;
            }
            live[ci] += op == "a" ? b : -b;
            peak[ci] = std::max(peak[ci], live[ci]);
            ++events;
            int64_t total = 0;
            for (int64_t v : live) total += v;
            points.push_back({t, live, total});
        } catch (const nlohmann::json::exception& e) {
            problems.push_back({path, n, str_cat("a field of the wrong type: ", e.what())});
        }
    }
    ZT_CHECK(!cats.empty(), "report: ", path, " is empty; expected a memory timeline");
    // Thinning: each kept point is the highest total of its run of `stride` events.
    const size_t stride = std::max<size_t>(1, (points.size() + kMaxPoints - 1) / kMaxPoints);
    std::vector<Series> series(cats.size());
    for (size_t k = 0; k < cats.size(); ++k) series[k].name = cats[k];
    for (size_t i = 0; i < points.size(); i += stride) {
        size_t best = i;
        for (size_t q = i; q < std::min(points.size(), i + stride); ++q)
            if (points[q].total > points[best].total) best = q;
        for (size_t k = 0; k < cats.size(); ++k) {
            series[k].x.push_back(points[best].t);
            series[k].y.push_back(static_cast<double>(points[best].live[k]));
        }
    }
    PlotOptions o;
    o.id = "plot-timeline";
    o.title = "Live bytes per category";
    o.x_label = "seconds since the timeline opened";
    o.y_label = "bytes";
    o.width = 1100;
    o.height = 420;
    o.stacked = o.bytes = true;
    std::string body = "<h1>zerotrain memory timeline</h1>\n<p class=\"note\">" +
                       html_escape(path) +
                       str_cat(", rank ", rank, ", ", events, " allocation and free events</p>\n");
    body += svg_line_plot(series, o);
    std::vector<std::vector<std::string>> rows;
    for (size_t k = 0; k < cats.size(); ++k)
        rows.push_back({cats[k], tick_label(static_cast<double>(peak[k]), true),
                        tick_label(static_cast<double>(live[k]), true)});
    body += "<h2>Per category</h2>\n" +
            html_table({"category", "peak live", "live at the end of the file"}, rows,
                       "table-timeline");
    if (!refused.empty())
        body += "<h2 class=\"error\">Refused allocations (out of memory)</h2>\n" +
                html_table({"t (s)", "category", "bytes"}, refused, "table-oom");
    body += problems_section(problems);
    return html_page("zerotrain memory timeline: " + path, body);
}

}  // namespace zt::report
