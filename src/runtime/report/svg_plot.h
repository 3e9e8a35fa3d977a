// SVG plots for the HTML report, drawn as text: line charts (optionally stacked areas) and bar
// charts (grouped or stacked). Each plot is a fixed-size <svg> with an id, white background, grey
// axes and grid, and series in saturated palette colours, so a screenshot tells data pixels from
// chrome. Non-finite points are skipped. Leaves out interaction: the report must open offline.
#pragma once

#include <string>
#include <vector>

namespace zt::report {

struct Series {
    std::string name;
    std::vector<double> x, y;  // same length
    bool dashed = false;
};

struct PlotOptions {
    std::string id;  // the <svg>'s id
    std::string title;
    std::string x_label;
    std::string y_label;
    int width = 560;       // pixels
    int height = 300;      // pixels
    bool stacked = false;  // lines: stacked areas; bars: stacked instead of grouped
    bool bytes = false;    // y ticks as bytes (KiB, MiB, ...) instead of SI
};

// The i-th palette colour ("#1f77b4", ...): saturated, never grey.
const char* palette_color(size_t i);
// &, <, >, " and ' escaped.
std::string html_escape(const std::string& s);
// A tick label: 1234 -> "1.23k" (SI) or "1.2 KiB" (bytes).
std::string tick_label(double v, bool bytes);

std::string svg_line_plot(const std::vector<Series>& series, const PlotOptions& opt);

// values[s][g]: series s (a legend entry) in group g (an x label).
std::string svg_bar_chart(const std::vector<std::string>& groups,
                          const std::vector<std::string>& series_names,
                          const std::vector<std::vector<double>>& values, const PlotOptions& opt);

}  // namespace zt::report
