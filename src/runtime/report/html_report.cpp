#include "runtime/report/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "runtime/config.h"
#include "runtime/report/compression_report.h"
#include "runtime/report/report_tables.h"
#include "runtime/report/svg_plot.h"
#include "runtime/run_estimate.h"
#include "util/error.h"

namespace zt::report {

namespace {

const std::vector<std::string>& plot_ids() {
    static const std::vector<std::string> kIds = {
        "plot-loss",   "plot-lr",           "plot-throughput", "plot-mfu",
        "plot-memory", "plot-memory-ranks", "plot-step-time",  "plot-comm"};
    return kIds;
}

PlotOptions plot(const char* id, const std::string& title, const std::string& y_label) {
    PlotOptions o;
    o.id = id;
    o.title = title;
    o.x_label = "step";
    o.y_label = y_label;
    return o;
}

Series step_series(const RunLog& log, const std::string& name, double StepRecord::*field) {
    Series s{name, {}, {}};
    for (const StepRecord& r : log.steps) {
        s.x.push_back(static_cast<double>(r.step));
        s.y.push_back(r.*field);
    }
    return s;
}

// Per-rank figures: the lines that carry `ranks`, or the step lines themselves on one rank.
struct RankFigures {
    std::vector<std::string> names;                   // "rank 0", ...
    std::vector<std::map<std::string, int64_t>> mem;  // the last line's memory per rank
    std::vector<double> compute_s, comm_s, io_s;      // mean seconds per step
};

RankFigures rank_figures(const RunLog& log) {
    RankFigures f;
    size_t n = 0;
    for (const StepRecord& r : log.steps) n = std::max(n, r.ranks.size());
    const bool per_rank = n > 0;
    if (!per_rank) n = log.steps.empty() ? 0 : 1;
    f.mem.resize(n);
    f.compute_s.assign(n, 0);
    f.comm_s.assign(n, 0);
    f.io_s.assign(n, 0);
    std::vector<int> lines(n, 0);
    for (size_t i = 0; i < n; ++i) f.names.push_back(str_cat("rank ", i));
    for (const StepRecord& r : log.steps) {
        if (!std::isfinite(r.step_time_s)) continue;
        if (!per_rank) {
            const double c = std::isfinite(r.comm_s) ? r.comm_s : 0;
            f.comm_s[0] += c;
            f.compute_s[0] += std::max(0.0, r.step_time_s - c);
            lines[0] += 1;
            f.mem[0] = r.mem;
            continue;
        }
        for (const RankRecord& rr : r.ranks) {
            if (rr.rank < 0 || static_cast<size_t>(rr.rank) >= n) continue;
            const auto i = static_cast<size_t>(rr.rank);
            // The rank's own split when the line has it; else step time less communication.
            const double io = std::isfinite(rr.io_s) ? rr.io_s : 0;
            f.comm_s[i] += rr.comm_s;
            f.io_s[i] += io;
            f.compute_s[i] += std::isfinite(rr.compute_s)
                                  ? rr.compute_s
                                  : std::max(0.0, r.step_time_s - rr.comm_s - io);
            lines[i] += 1;
            f.mem[i] = rr.mem;
        }
    }
    for (size_t i = 0; i < n; ++i)
        if (lines[i] > 0) {
            f.compute_s[i] /= lines[i];
            f.comm_s[i] /= lines[i];
            f.io_s[i] /= lines[i];
        }
    return f;
}

std::string plots(const RunLog& log) {
    std::string s = "<h2>Training</h2>\n<div class=\"grid\">\n";
    Series eval{"eval_loss", {}, {}, true};
    for (const EvalRecord& e : log.evals) {
        eval.x.push_back(static_cast<double>(e.step));
        eval.y.push_back(e.eval_loss);
    }
    std::vector<Series> loss{step_series(log, "loss", &StepRecord::loss)};
    if (!eval.x.empty()) loss.push_back(eval);
    s += svg_line_plot(loss, plot("plot-loss", "Loss", "loss"));
    s += svg_line_plot({step_series(log, "lr", &StepRecord::lr)},
                       plot("plot-lr", "Learning rate", "lr"));
    const char* unit = log.samples ? "samples/s" : "tokens/s";
    s += svg_line_plot({step_series(log, unit, &StepRecord::tokens_per_s)},
                       plot("plot-throughput", "Throughput", unit));
    // Click models: the held-out AUC, and the distinct ids per table of each step's micro-batch.
    Series auc{"eval_auc", {}, {}};
    for (const EvalRecord& e : log.evals)
        if (auto it = e.extra.find("eval_auc"); it != e.extra.end()) {
            auc.x.push_back(static_cast<double>(e.step));
            auc.y.push_back(it->second);
        }
    if (!auc.x.empty()) s += svg_line_plot({auc}, plot("plot-auc", "Evaluation AUC", "AUC"));
    size_t tables = 0;
    for (const StepRecord& r : log.steps) tables = std::max(tables, r.unique_ids.size());
    if (tables > 0) {
        std::vector<Series> ids;
        for (size_t k = 0; k < tables; ++k) {
            Series t{str_cat("table ", k), {}, {}};
            for (const StepRecord& r : log.steps)
                if (k < r.unique_ids.size()) {
                    t.x.push_back(static_cast<double>(r.step));
                    t.y.push_back(r.unique_ids[k]);
                }
            ids.push_back(t);
        }
        s += svg_line_plot(
            ids, plot("plot-unique-ids", "Distinct ids per table (rows touched by a micro-batch)",
                      "ids"));
    }
    // Sharded tables: rows each table's update touched, and the exchanges' traffic and time.
    std::map<std::string, Series> rows;
    bool have_exchange = false;
    for (const StepRecord& r : log.steps) {
        have_exchange = have_exchange || std::isfinite(r.alltoall_bytes);
        for (const auto& [name, v] : r.table_rows) {
            Series& t = rows.try_emplace(name, Series{name, {}, {}}).first->second;
            t.x.push_back(static_cast<double>(r.step));
            t.y.push_back(v);
        }
    }
    if (!rows.empty()) {
        std::vector<Series> per_table;
        for (auto& [name, t] : rows) per_table.push_back(std::move(t));
        s += svg_line_plot(per_table, plot("plot-rows-touched",
                                           "Rows updated per sharded table (all ranks)", "rows"));
    }
    if (have_exchange) {
        PlotOptions bo =
            plot("plot-alltoall-bytes", "Embedding all-to-all bytes sent (all ranks)", "bytes");
        bo.bytes = true;
        s += svg_line_plot({step_series(log, "bytes", &StepRecord::alltoall_bytes)}, bo);
        s += svg_line_plot(
            {step_series(log, "seconds", &StepRecord::alltoall_s)},
            plot("plot-alltoall-s", "Seconds in the embedding exchanges (slowest rank)", "s"));
    }
    bool have_mfu = false;
    for (const StepRecord& r : log.steps) have_mfu = have_mfu || std::isfinite(r.mfu);
    if (have_mfu) {  // against the GEMM ceiling measured on the machine (docs/monitoring.md)
        Series m = step_series(log, "MFU %", &StepRecord::mfu);
        for (double& v : m.y) v *= 100;
        s += svg_line_plot({m}, plot("plot-mfu", "MFU (model FLOP/s over the GEMM ceiling)", "%"));
    } else {
        s += svg_line_plot({step_series(log, "model FLOP/s", &StepRecord::mfu_flops_per_s)},
                           plot("plot-mfu", "Model FLOP/s (the MFU numerator)", "FLOP/s"));
    }
    s += "</div>\n<h2>Memory</h2>\n<div class=\"grid\">\n";
    std::vector<Series> mem;
    for (const std::string& c : memory_categories()) {
        Series m{c, {}, {}};
        for (const StepRecord& r : log.steps) {
            auto it = r.mem.find(c);
            m.x.push_back(static_cast<double>(r.step));
            m.y.push_back(it == r.mem.end() ? 0.0 : static_cast<double>(it->second));
        }
        mem.push_back(m);
    }
    PlotOptions mo = plot("plot-memory", "Memory per category (largest over ranks)", "bytes");
    mo.stacked = mo.bytes = true;
    s += svg_line_plot(mem, mo);
    const RankFigures rf = rank_figures(log);
    std::vector<std::vector<double>> per_rank;
    for (const std::string& c : memory_categories()) {
        std::vector<double> v;
        for (const auto& m : rf.mem) {
            auto it = m.find(c);
            v.push_back(it == m.end() ? 0.0 : static_cast<double>(it->second));
        }
        per_rank.push_back(v);
    }
    PlotOptions ro = plot("plot-memory-ranks", "Memory per rank (latest per-rank line)", "bytes");
    ro.stacked = ro.bytes = true;
    ro.x_label = "rank";
    s += svg_bar_chart(rf.names, memory_categories(), per_rank, ro);
    s += "</div>\n<h2>Time and communication</h2>\n<div class=\"grid\">\n";
    PlotOptions to = plot("plot-step-time", "Step time per rank (mean)", "seconds");
    to.stacked = true;
    to.x_label = "rank";
    s += svg_bar_chart(rf.names, {"compute", "exposed communication", "I/O"},
                       {rf.compute_s, rf.comm_s, rf.io_s}, to);
    // The plan field: each step's measured time and peak against the planner's prediction for
    // the run's layout (docs/planner.md, "Validation in every run").
    bool plan_time = false, plan_peak = false;
    for (const StepRecord& r : log.steps) {
        plan_time = plan_time || std::isfinite(r.plan_step_s);
        plan_peak = plan_peak || std::isfinite(r.plan_peak_bytes);
    }
    if (plan_time) {
        Series p = step_series(log, "predicted (planner)", &StepRecord::plan_step_s);
        p.dashed = true;
        s += svg_line_plot({step_series(log, "measured", &StepRecord::step_time_s), p},
                           plot("plot-plan-step",
                                "Step time: measured against the planner's prediction", "seconds"));
    }
    if (plan_peak) {
        Series m{"measured peak", {}, {}};
        for (const StepRecord& r : log.steps) {
            auto it = r.mem.find("peak");
            m.x.push_back(static_cast<double>(r.step));
            m.y.push_back(it == r.mem.end() ? NAN : static_cast<double>(it->second));
        }
        Series p = step_series(log, "predicted peak (planner)", &StepRecord::plan_peak_bytes);
        p.dashed = true;
        PlotOptions po = plot("plot-plan-peak",
                              "Peak memory: measured against the planner's prediction", "bytes");
        po.bytes = true;
        s += svg_line_plot({m, p}, po);
    }
    const CommTotals ct = comm_totals(log);
    std::vector<double> bytes;
    for (const auto& [kind, t] : ct) bytes.push_back(static_cast<double>(t.bytes));
    std::vector<std::string> kinds;
    for (const auto& [kind, t] : ct) kinds.push_back(kind);
    PlotOptions co =
        plot("plot-comm", "Communication volume per collective (rank 0, whole run)", "bytes sent");
    co.bytes = true;
    co.x_label = "collective";
    s += svg_bar_chart(kinds, {"bytes sent"}, {bytes}, co);
    return s + "</div>\n";
}

// The estimator's per-category prediction for the run's config against the last step's bytes.
std::string plan_table(const RunDirContents& run) {
    std::string s = "<h2>Plan: predicted against measured</h2>\n";
    if (!run.config) return s + "<p class=\"note\">no config.json in the run directory</p>\n";
    if (run.log.steps.empty()) return s + "<p class=\"note\">no step lines to compare with</p>\n";
    const StepRecord& last = run.log.steps.back();
    size_t ranks = 1;
    for (const StepRecord& r : run.log.steps) ranks = std::max(ranks, r.ranks.size());
    Estimate e;
    try {
        const TrainConfig cfg = parse_config(*run.config, static_cast<int64_t>(ranks)).config;
        e = estimate_run(estimate_spec(cfg, cfg.zero.stage, false, cfg.dp));
    } catch (const std::exception& ex) {
        return s + "<p class=\"note\">no estimate for this config: " + html_escape(ex.what()) +
               "</p>\n";
    }
    std::vector<std::vector<std::string>> rows;
    auto row = [&](const std::string& name, double predicted, double measured) {
        rows.push_back(
            {name, tick_label(predicted, true), tick_label(measured, true),
             predicted > 0 ? str_cat(std::round(1000 * measured / predicted) / 1000) : "-"});
    };
    const std::vector<std::string> cats = memory_categories();
    for (size_t c = 0; c < cats.size(); ++c) {
        auto it = last.mem.find(cats[c]);
        row(cats[c], static_cast<double>(e.device[c]),
            it == last.mem.end() ? 0.0 : static_cast<double>(it->second));
    }
    auto peak = last.mem.find("peak");
    row("peak (total)", static_cast<double>(e.device_total),
        peak == last.mem.end() ? 0.0 : static_cast<double>(peak->second));
    // The planner's own prediction for the layout (the plan field of the last step's line).
    if (std::isfinite(last.plan_peak_bytes))
        row("peak (planner)", last.plan_peak_bytes,
            peak == last.mem.end() ? 0.0 : static_cast<double>(peak->second));
    if (std::isfinite(last.plan_step_s) && std::isfinite(last.step_time_s))
        rows.push_back({"step time, s (planner)", tick_label(last.plan_step_s, false),
                        tick_label(last.step_time_s, false),
                        str_cat(std::round(1000 * last.step_time_s / last.plan_step_s) / 1000)});
    return s +
           str_cat("<p>Estimator (zerotrain estimate) for ", e.spec.state.param_count,
                   " parameters, ZeRO stage ", e.spec.state.zero_stage, ", ", e.spec.state.ranks,
                   " rank(s), against step ", last.step,
                   "'s bytes (activations are live at the end of a step only when the run "
                   "keeps them, so measured activations are usually below the peak "
                   "prediction).</p>\n") +
           html_table({"category", "predicted", "measured", "measured / predicted"}, rows,
                      "table-plan");
}

}  // namespace

const std::vector<std::string>& run_report_plot_ids() { return plot_ids(); }

std::string render_run_report(const RunDirContents& run) {
    std::string body =
        "<h1>zerotrain run report</h1>\n<p class=\"note\">" + html_escape(run.dir) + "</p>\n";
    body += summary_table(run.log);
    body += errors_section(run.log);
    body += plots(run.log);
    body += comm_table(comm_totals(run.log));
    body += compression_section(run.log);
    body += plan_table(run);
    body += restarts_section(run.restarts);
    body += config_section(run.config);
    body += problems_section(run.log.problems);
    return html_page("zerotrain report: " + run.dir, body);
}

}  // namespace zt::report
