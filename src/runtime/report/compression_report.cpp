#include "runtime/report/compression_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "runtime/report/report_tables.h"
#include "runtime/report/svg_plot.h"
#include "util/error.h"
#include "util/median.h"

namespace zt::report {

namespace {

struct ChannelInfo {
    const char* key;
    const char* label;
    const char* counted_on;  // whose traffic the metrics entry counts
};

// docs/compression.md says what each entry counts.
constexpr ChannelInfo kChannels[] = {
    {"gradients", "gradient reductions (compression.gradients)", "rank 0"},
    {"momentum", "1-bit Adam momentum", "rank 0"},
    {"weights", "ZeRO-3 weight gathers (zero_quantized_weights)", "rank 0"},
    {"embedding", "embedding all-to-alls (embedding.comm_precision)", "all ranks"},
    {"pipeline", "pipeline sends (parallel.pipeline.comm_precision)", "rank 0's stage"},
};

const ChannelInfo* channel_info(const std::string& key) {
    for (const ChannelInfo& c : kChannels)
        if (key == c.key) return &c;
    return nullptr;
}

std::string number_text(double v, int digits) {
    if (!std::isfinite(v)) return "-";
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    return buf;
}

PlotOptions step_plot(const char* id, const char* title, const char* y_label, bool bytes) {
    PlotOptions o;
    o.id = id;
    o.title = title;
    o.x_label = "step";
    o.y_label = y_label;
    o.bytes = bytes;
    return o;
}

// One series per channel of a CompressionRecord field, over the lines that carry it.
std::vector<Series> channel_series(const RunLog& log, const std::vector<CompressionSummary>& sum,
                                   double CompressionRecord::*field) {
    std::vector<Series> out;
    for (const CompressionSummary& c : sum) {
        Series s{c.channel, {}, {}};
        for (const StepRecord& r : log.steps)
            if (auto it = r.compression.find(c.channel); it != r.compression.end()) {
                s.x.push_back(static_cast<double>(r.step));
                s.y.push_back(it->second.*field);
            }
        out.push_back(std::move(s));
    }
    return out;
}

std::string cross_host_table(const RunLog& log) {
    int64_t lines = 0;
    double total = 0, last = NAN;
    for (const StepRecord& r : log.steps)
        if (std::isfinite(r.cross_host_bytes)) {
            ++lines;
            total += r.cross_host_bytes;
            last = r.cross_host_bytes;
        }
    if (lines == 0) return "";
    std::vector<std::vector<std::string>> rows = {
        {"step lines", str_cat(lines)},
        {"mean per step", tick_label(total / static_cast<double>(lines), true)},
        {"last step", tick_label(last, true)},
        {"whole run", tick_label(total, true)}};
    return "<p>Bytes rank 0 sent across hosts (comm.hierarchical, "
           "<code>comm_cross_host_bytes</code>):</p>\n" +
           html_table({"figure", "bytes"}, rows, "table-cross-host");
}

}  // namespace

std::vector<CompressionSummary> compression_summary(const RunLog& log) {
    std::map<std::string, CompressionSummary> by_key;
    std::map<std::string, std::vector<double>> errors;
    std::map<std::string, double> raw, wire;
    for (const StepRecord& r : log.steps)
        for (const auto& [key, c] : r.compression) {
            CompressionSummary& s = by_key[key];
            s.channel = key;
            if (!c.codec.empty()) s.codec = c.codec;
            s.steps += 1;
            raw[key] += std::isfinite(c.raw_bytes) ? c.raw_bytes : 0;
            wire[key] += std::isfinite(c.wire_bytes) ? c.wire_bytes : 0;
            if (std::isfinite(c.relative_error)) {
                errors[key].push_back(c.relative_error);
                s.error_last = c.relative_error;
            }
        }
    std::vector<CompressionSummary> out;
    auto take = [&](const std::string& key) {
        auto it = by_key.find(key);
        if (it == by_key.end()) return;
        CompressionSummary s = it->second;
        by_key.erase(it);
        if (raw[key] == 0 && wire[key] == 0) return;  // nothing sent (one rank, a warm-up)
        const auto n = static_cast<double>(s.steps);
        s.raw_per_step = raw[key] / n;
        s.wire_per_step = wire[key] / n;
        if (wire[key] > 0) s.ratio = raw[key] / wire[key];
        s.error_median = median(errors[key]);
        out.push_back(std::move(s));
    };
    for (const ChannelInfo& c : kChannels) take(c.key);
    while (!by_key.empty()) take(by_key.begin()->first);  // keys of a later version
    return out;
}

std::string compression_section(const RunLog& log) {
    const std::vector<CompressionSummary> sum = compression_summary(log);
    const std::string cross = cross_host_table(log);
    if (sum.empty() && cross.empty()) return "";
    std::string s = "<h2>Compressed communication</h2>\n";
    if (!sum.empty()) {
        std::vector<std::vector<std::string>> rows;
        for (const CompressionSummary& c : sum) {
            const ChannelInfo* info = channel_info(c.channel);
            rows.push_back({info ? info->label : c.channel, c.codec.empty() ? "-" : c.codec,
                            info ? info->counted_on : "-", str_cat(c.steps),
                            tick_label(c.raw_per_step, true), tick_label(c.wire_per_step, true),
                            number_text(c.ratio, 4), number_text(c.error_median, 3),
                            number_text(c.error_last, 3)});
        }
        s += "<p class=\"note\">Per step line: the bytes the plain collectives would have sent "
             "(raw) and the bytes sent (wire), their ratio over the run, and the relative error "
             "of the decoded values, sqrt(sum (decoded - input)^2 / sum input^2).</p>\n";
        s += html_table(
            {"channel", "codec", "counted on", "steps", "raw bytes / step", "wire bytes / step",
             "raw / wire", "relative error (median)", "relative error (last)"},
            rows, "table-compression");
    }
    s += cross;
    if (sum.empty()) return s;
    s += "<div class=\"grid\">\n";
    s += svg_line_plot(channel_series(log, sum, &CompressionRecord::wire_bytes),
                       step_plot("plot-compression-wire", "Bytes on the wire per step, by channel",
                                 "wire bytes", true));
    s += svg_line_plot(
        channel_series(log, sum, &CompressionRecord::relative_error),
        step_plot("plot-compression-error", "Relative error of the decoded values, by channel",
                  "relative error", false));
    return s + "</div>\n";
}

}  // namespace zt::report
