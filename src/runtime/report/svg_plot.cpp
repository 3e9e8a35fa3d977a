#include "runtime/report/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace zt::report {

namespace {

constexpr int kLeft = 72, kRight = 16, kTop = 52, kBottom = 44;  // pixels around the plot area

std::string num(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", v);
    return buf;
}

// Ticks at 1, 2 or 5 x 10^k covering [lo, hi], about `want` of them.
std::vector<double> nice_ticks(double lo, double hi, int want) {
    const double span = hi - lo;
    const double raw = span / want;
    const double mag = std::pow(10, std::floor(std::log10(raw)));
    double step = mag;
    for (double m : {1.0, 2.0, 5.0, 10.0})
        if (m * mag >= raw) {
            step = m * mag;
            break;
        }
    std::vector<double> t;
    for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
        t.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
    return t;
}

struct Frame {
    double x0, x1, y0, y1;  // data range
    int w, h;               // svg size
    double px(double x) const {
        return kLeft + (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5) * (w - kLeft - kRight);
    }
    double py(double y) const {
        return h - kBottom - (y1 > y0 ? (y - y0) / (y1 - y0) : 0.5) * (h - kTop - kBottom);
    }
};

// Widens a degenerate or inverted range so that ticks and scaling work.
void pad_range(double& lo, double& hi) {
    if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
    if (hi <= lo) {
        const double d = lo == 0 ? 1 : std::fabs(lo) * 0.1;
        lo -= d;
        hi += d;
    }
}

std::string open_svg(const PlotOptions& o) {
    return "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"" + html_escape(o.id) +
           "\" class=\"plot\" width=\"" + std::to_string(o.width) + "\" height=\"" +
           std::to_string(o.height) + "\" viewBox=\"0 0 " + std::to_string(o.width) + " " +
           std::to_string(o.height) +
           "\">\n<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n" + "<text x=\"" +
           std::to_string(o.width / 2) + "\" y=\"18\" text-anchor=\"middle\" class=\"title\">" +
           html_escape(o.title) + "</text>\n";
}

std::string legend(const std::vector<std::string>& names, int width) {
    std::string s;
    double x = kLeft;
    for (size_t i = 0; i < names.size(); ++i) {
        const double w = 28 + 6.5 * static_cast<double>(names[i].size());
        if (x + w > width && x > kLeft) break;  // no room: the rest stays unnamed
        s += "<rect x=\"" + num(x) + "\" y=\"28\" width=\"12\" height=\"10\" fill=\"" +
             palette_color(i) + "\"/><text x=\"" + num(x + 16) + "\" y=\"37\" class=\"legend\">" +
             html_escape(names[i]) + "</text>\n";
        x += w;
    }
    return s;
}

// Grid, y ticks, axes and labels; x ticks when numeric (bar charts label their groups).
std::string axes(const Frame& f, const PlotOptions& o, bool x_ticks) {
    std::string s;
    // Byte ticks fall on round numbers of the unit that fits (0, 64 KiB, 128 KiB, ...).
    double unit = 1;
    while (o.bytes && std::max(std::fabs(f.y0), std::fabs(f.y1)) / unit >= 1024) unit *= 1024;
    std::vector<double> ticks = nice_ticks(f.y0 / unit, f.y1 / unit, 5);
    for (double& t : ticks) t *= unit;
    for (double t : ticks) {
        const std::string y = num(f.py(t));
        s += "<line x1=\"" + std::to_string(kLeft) + "\" x2=\"" + std::to_string(f.w - kRight) +
             "\" y1=\"" + y + "\" y2=\"" + y + "\" class=\"grid\"/><text x=\"" +
             std::to_string(kLeft - 6) + "\" y=\"" + num(f.py(t) + 4) +
             "\" text-anchor=\"end\" class=\"tick\">" + tick_label(t, o.bytes) + "</text>\n";
    }
    if (x_ticks)
        for (double t : nice_ticks(f.x0, f.x1, 6))
            s += "<text x=\"" + num(f.px(t)) + "\" y=\"" + std::to_string(f.h - kBottom + 16) +
                 "\" text-anchor=\"middle\" class=\"tick\">" + tick_label(t, false) + "</text>\n";
    s += "<polyline points=\"" + std::to_string(kLeft) + "," + std::to_string(kTop) + " " +
         std::to_string(kLeft) + "," + std::to_string(f.h - kBottom) + " " +
         std::to_string(f.w - kRight) + "," + std::to_string(f.h - kBottom) +
         "\" class=\"axis\"/>\n";
    s += "<text x=\"" + std::to_string((kLeft + f.w - kRight) / 2) + "\" y=\"" +
         std::to_string(f.h - 6) + "\" text-anchor=\"middle\" class=\"label\">" +
         html_escape(o.x_label) + "</text>\n";
    s += "<text transform=\"translate(14," + std::to_string((kTop + f.h - kBottom) / 2) +
         ") rotate(-90)\" text-anchor=\"middle\" class=\"label\">" + html_escape(o.y_label) +
         "</text>\n";
    return s;
}

std::string no_data(const PlotOptions& o) {
    return open_svg(o) + "<text x=\"" + std::to_string(o.width / 2) + "\" y=\"" +
           std::to_string(o.height / 2) + "\" text-anchor=\"middle\" class=\"nodata\">no data" +
           "</text>\n</svg>\n";
}

}  // namespace

const char* palette_color(size_t i) {
    static const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                    "#9467bd", "#e377c2", "#17becf", "#bcbd22"};
    return kColors[i % (sizeof kColors / sizeof kColors[0])];
}

std::string html_escape(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&quot;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

std::string tick_label(double v, bool bytes) {
    static const char* kSi[] = {"", "k", "M", "G", "T", "P"};
    static const char* kBin[] = {" B", " KiB", " MiB", " GiB", " TiB", " PiB"};
    const double base = bytes ? 1024 : 1000;
    int i = 0;
    double a = v;
    while (std::fabs(a) >= base && i < 5) {
        a /= base;
        ++i;
    }
    char buf[32];
    if (!bytes && i == 0 && std::fabs(v) < 0.01 && v != 0)
        std::snprintf(buf, sizeof buf, "%.2g", v);
    else  // 3 significant digits, and all of them past 100 (1000 KiB, never "1e+03 KiB")
        std::snprintf(buf, sizeof buf, std::fabs(a) >= 100 ? "%.0f%s" : "%.3g%s", a,
                      bytes ? kBin[i] : kSi[i]);
    return buf;
}

std::string svg_line_plot(const std::vector<Series>& series, const PlotOptions& opt) {
    // Stacked: each series' y on top of the ones before it, point by point (shared x).
    std::vector<std::vector<double>> top(series.size());
    for (size_t s = 0; s < series.size(); ++s) {
        top[s] = series[s].y;
        if (opt.stacked && s > 0)
            for (size_t i = 0; i < top[s].size() && i < top[s - 1].size(); ++i)
                top[s][i] += top[s - 1][i];
    }
    constexpr double kInf = std::numeric_limits<double>::infinity();
    double x0 = kInf, x1 = -kInf, y0 = opt.stacked ? 0 : kInf, y1 = -kInf;
    size_t points = 0;
    for (size_t s = 0; s < series.size(); ++s)
        for (size_t i = 0; i < series[s].x.size() && i < top[s].size(); ++i) {
            if (!std::isfinite(series[s].x[i]) || !std::isfinite(top[s][i])) continue;
            x0 = std::min(x0, series[s].x[i]);
            x1 = std::max(x1, series[s].x[i]);
            y0 = std::min(y0, top[s][i]);
            y1 = std::max(y1, top[s][i]);
            ++points;
        }
    if (points == 0) return no_data(opt);
    if (y0 > 0 && y0 < 0.5 * y1) y0 = 0;  // start at zero when that costs little
    const double margin = (y1 - y0) * 0.05;
    y1 += margin;
    if (y0 != 0) y0 -= margin;
    pad_range(x0, x1);
    pad_range(y0, y1);
    const Frame f{x0, x1, y0, y1, opt.width, opt.height};
    std::string s = open_svg(opt) + axes(f, opt, true);
    std::vector<std::string> names;
    for (size_t k = 0; k < series.size(); ++k) {
        names.push_back(series[k].name);
        std::string pts, lower;
        for (size_t i = 0; i < series[k].x.size() && i < top[k].size(); ++i) {
            if (!std::isfinite(series[k].x[i]) || !std::isfinite(top[k][i])) continue;
            pts += num(f.px(series[k].x[i])) + "," + num(f.py(top[k][i])) + " ";
            const double base = opt.stacked && k > 0 && i < top[k - 1].size() ? top[k - 1][i] : 0;
            lower = num(f.px(series[k].x[i])) + "," + num(f.py(base)) + " " + lower;
        }
        if (opt.stacked) {
            s += "<polygon points=\"" + pts + lower + "\" fill=\"" + palette_color(k) +
                 "\" fill-opacity=\"0.85\" stroke=\"" + palette_color(k) + "\"/>\n";
        } else {
            s += "<polyline points=\"" + pts + "\" fill=\"none\" stroke=\"" + palette_color(k) +
                 "\" stroke-width=\"2\"" + (series[k].dashed ? " stroke-dasharray=\"6 3\"" : "") +
                 "/>\n";
            if (series[k].x.size() <= 2)  // a lone point draws no line: mark it
                for (size_t i = 0; i < series[k].x.size() && i < top[k].size(); ++i)
                    s += "<circle cx=\"" + num(f.px(series[k].x[i])) + "\" cy=\"" +
                         num(f.py(top[k][i])) + "\" r=\"4\" fill=\"" + palette_color(k) + "\"/>\n";
        }
    }
    return s + legend(names, opt.width) + "</svg>\n";
}

std::string svg_bar_chart(const std::vector<std::string>& groups,
                          const std::vector<std::string>& series_names,
                          const std::vector<std::vector<double>>& values, const PlotOptions& opt) {
    double y1 = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
        double sum = 0;
        for (const auto& v : values) {
            const double x = g < v.size() && std::isfinite(v[g]) ? std::max(0.0, v[g]) : 0;
            sum += x;
            y1 = std::max(y1, x);
        }
        if (opt.stacked) y1 = std::max(y1, sum);
    }
    if (groups.empty() || values.empty() || y1 <= 0) return no_data(opt);
    y1 *= 1.05;
    const Frame f{0, 1, 0, y1, opt.width, opt.height};
    std::string s = open_svg(opt) + axes(f, opt, false);
    const double slot =
        static_cast<double>(opt.width - kLeft - kRight) / static_cast<double>(groups.size());
    const double inner = slot * 0.7;
    const size_t n = values.size();
    for (size_t g = 0; g < groups.size(); ++g) {
        const double gx = kLeft + slot * static_cast<double>(g) + (slot - inner) / 2;
        double base = 0;
        for (size_t k = 0; k < n; ++k) {
            const double v = g < values[k].size() && std::isfinite(values[k][g])
                                 ? std::max(0.0, values[k][g])
                                 : 0;
            const double bx =
                opt.stacked ? gx : gx + inner * static_cast<double>(k) / static_cast<double>(n);
            const double bw = opt.stacked ? inner : inner / static_cast<double>(n);
            const double ytop = f.py(base + v), ybot = f.py(base);
            s += "<rect x=\"" + num(bx) + "\" y=\"" + num(ytop) + "\" width=\"" + num(bw) +
                 "\" height=\"" + num(ybot - ytop) + "\" fill=\"" + palette_color(k) +
                 "\"><title>" + html_escape(groups[g]) + " " +
                 html_escape(k < series_names.size() ? series_names[k] : "") + ": " +
                 tick_label(v, opt.bytes) + "</title></rect>\n";
            if (opt.stacked) base += v;
        }
        s += "<text x=\"" + num(gx + inner / 2) + "\" y=\"" +
             std::to_string(opt.height - kBottom + 16) +
             "\" text-anchor=\"middle\" class=\"tick\">" + html_escape(groups[g]) + "</text>\n";
    }
    return s + legend(series_names, opt.width) + "</svg>\n";
}

}  // namespace zt::report
