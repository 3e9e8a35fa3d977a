#include "runtime/report/report_tables.h"

#include <cmath>
#include <cstdio>
#include <map>

#include "runtime/report/html_report.h"
#include "runtime/report/svg_plot.h"
#include "util/error.h"

namespace zt::report {

namespace {

std::string fixed(double v, int digits = 4) {
    if (!std::isfinite(v)) return "-";
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    return buf;
}

// Dotted keys and JSON values of a config, depth first.
void flatten(const nlohmann::json& j, const std::string& prefix,
             std::vector<std::vector<std::string>>& rows) {
    if (j.is_object() && !j.empty()) {
        for (auto it = j.begin(); it != j.end(); ++it)
            flatten(*it, prefix.empty() ? it.key() : prefix + "." + it.key(), rows);
        return;
    }
    rows.push_back({prefix, j.dump()});
}

const char* kStyle = R"(
body { font-family: sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; }
.grid { display: flex; flex-wrap: wrap; gap: 16px; }
svg.plot { border: 1px solid #ddd; }
svg .title { font-size: 14px; font-weight: bold; fill: #222; }
svg .tick, svg .legend { font-size: 11px; fill: #444; }
svg .label { font-size: 12px; fill: #444; }
svg .nodata { font-size: 14px; fill: #888; }
svg .grid { stroke: #e4e4e4; stroke-width: 1; }
svg .axis { stroke: #444; stroke-width: 1; fill: none; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.error { color: #a00; font-weight: bold; }
.note { color: #666; font-size: 13px; }
)";

// Records each plot's page box (x,y,w,h in CSS pixels) as data-box, for tests that look at a
// screenshot; data-ready says the script ran to its end.
const char* kScript = R"(<script>
(function () {
  var plots = document.querySelectorAll('svg.plot');
  for (var i = 0; i < plots.length; i++) {
    var r = plots[i].getBoundingClientRect();
    plots[i].setAttribute('data-box', [Math.round(r.left + window.scrollX),
      Math.round(r.top + window.scrollY), Math.round(r.width), Math.round(r.height)].join(','));
  }
  document.body.setAttribute('data-ready', String(plots.length));
})();
</script>
)";

}  // namespace

std::string html_page(const std::string& title, const std::string& body) {
    return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
           html_escape(title) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n" +
           body + kScript + "</body>\n</html>\n";
}

CommTotals comm_totals(const RunLog& log) {
    CommTotals t;
    for (const StepRecord& r : log.steps)
        for (const auto& [kind, c] : r.comm) {
            CommKindRecord& a = t[kind];
            a.count += c.count;
            a.bytes += c.bytes;
            a.seconds += c.seconds;
        }
    return t;
}

std::string html_table(const std::vector<std::string>& header,
                       const std::vector<std::vector<std::string>>& rows, const std::string& id) {
    std::string s = id.empty() ? "<table>\n<tr>" : "<table id=\"" + html_escape(id) + "\">\n<tr>";
    for (const std::string& h : header) s += "<th>" + html_escape(h) + "</th>";
    s += "</tr>\n";
    for (const auto& r : rows) {
        s += "<tr>";
        for (const std::string& c : r) s += "<td>" + html_escape(c) + "</td>";
        s += "</tr>\n";
    }
    return s + "</table>\n";
}

std::string summary_table(const RunLog& log) {
    std::vector<std::vector<std::string>> rows;
    rows.push_back({"step lines", str_cat(log.steps.size())});
    if (!log.steps.empty()) {
        const StepRecord& last = log.steps.back();
        rows.push_back({"last step", str_cat(last.step)});
        rows.push_back({"final loss", fixed(last.loss, 6)});
        double tok = 0, peak = 0;
        int n = 0, skipped = 0;
        for (size_t i = 0; i < log.steps.size(); ++i) {
            const StepRecord& r = log.steps[i];
            skipped += r.skipped ? 1 : 0;
            if (auto it = r.mem.find("peak"); it != r.mem.end())
                peak = std::max(peak, static_cast<double>(it->second));
            if (i > 0 && std::isfinite(r.tokens_per_s)) {  // the first step warms up
                tok += r.tokens_per_s;
                ++n;
            }
        }
        rows.push_back({log.samples ? "mean samples/s (after the first step)"
                                    : "mean tokens/s (after the first step)",
                        n ? fixed(tok / n) : "-"});
        rows.push_back({"peak memory (largest over ranks)", tick_label(peak, true)});
        rows.push_back({"skipped steps", str_cat(skipped)});
        std::string slow;  // the ranks monitor named stragglers, with the lines naming them
        std::map<int64_t, int> named;
        for (const StepRecord& r : log.steps)
            for (int64_t k : r.stragglers) named[k] += 1;
        for (const auto& [k, times] : named)
            slow += str_cat(slow.empty() ? "" : ", ", "rank ", k, " (", times, " lines)");
        rows.push_back({"stragglers", slow.empty() ? "none named" : slow});
    }
    if (!log.evals.empty())
        rows.push_back({"final eval loss", fixed(log.evals.back().eval_loss, 6)});
    rows.push_back({"errors", str_cat(log.errors.size())});
    return "<h2>Summary</h2>\n" + html_table({"figure", "value"}, rows, "table-summary");
}

std::string errors_section(const RunLog& log) {
    if (log.errors.empty()) return "";
    std::string s = "<h2 class=\"error\">Errors</h2>\n";
    std::vector<std::vector<std::string>> rows;
    for (const ErrorRecord& e : log.errors)
        rows.push_back({e.step >= 0 ? str_cat(e.step) : "-", e.message});
    return s + html_table({"steps completed", "error"}, rows, "table-errors");
}

std::string comm_table(const CommTotals& totals) {
    std::string s = "<h2>Communication per collective (rank 0, whole run)</h2>\n";
    if (totals.empty()) return s + "<p class=\"note\">no collectives (one process)</p>\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto& [kind, t] : totals)
        rows.push_back({kind, str_cat(t.count), tick_label(static_cast<double>(t.bytes), true),
                        fixed(t.seconds),
                        t.seconds > 0
                            ? tick_label(static_cast<double>(t.bytes) / t.seconds, true) + "/s"
                            : "-"});
    return s + html_table({"collective", "count", "bytes sent", "seconds", "bandwidth"}, rows,
                          "table-comm");
}

std::string restarts_section(const std::optional<std::vector<RestartRecord>>& restarts) {
    std::string s = "<h2>Restarts</h2>\n";
    if (!restarts)
        return s + "<p class=\"note\">no restarts.jsonl: the run was not supervised</p>\n";
    if (restarts->empty()) return s + "<p class=\"note\">none</p>\n";
    std::vector<std::vector<std::string>> rows;
    for (const RestartRecord& r : *restarts)
        rows.push_back({r.time, r.attempt, r.cause, r.resumed_from, r.recovery_s});
    return s + html_table({"time", "attempt", "cause", "resumed from step", "recovery (s)"}, rows,
                          "table-restarts");
}

std::string config_section(const std::optional<nlohmann::json>& config) {
    std::string s = "<h2>Configuration</h2>\n";
    if (!config)
        return s +
               "<p class=\"note\">no config.json in the run directory (runs before this "
               "version did not save it)</p>\n";
    std::vector<std::vector<std::string>> rows;
    flatten(*config, "", rows);
    return s + html_table({"key", "value"}, rows, "table-config");
}

std::string problems_section(const std::vector<LogProblem>& problems) {
    if (problems.empty()) return "";
    std::vector<std::vector<std::string>> rows;
    for (const LogProblem& p : problems)
        rows.push_back({p.file, p.line > 0 ? str_cat(p.line) : "-", p.what});
    return "<h2>Lines skipped</h2>\n" +
           html_table({"file", "line", "problem"}, rows, "table-problems");
}

}  // namespace zt::report
