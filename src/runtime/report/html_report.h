// `zerotrain report`: one self-contained HTML page (inline CSS and SVG, a few lines of inline
// script that only record each plot's box) for a run directory or a memory timeline file. The
// page needs no network. Every plot is an <svg class="plot"> with a fixed id (run_report_plot_ids),
// so tests can find each one in a screenshot.
#pragma once

#include <string>
#include <vector>

#include "runtime/report/run_log.h"

namespace zt::report {

// The ids of the plots a run report holds, in page order.
const std::vector<std::string>& run_report_plot_ids();

// The page for a run directory's contents.
std::string render_run_report(const RunDirContents& run);

// The page for a memory timeline file (docs/memory-timeline.md): live bytes per category over
// time. Throws (kInput) when the file is not a memory timeline.
std::string render_timeline_report(const std::string& timeline_path);

// Shared page frame: title, inline style, body, and the script that records plot boxes.
std::string html_page(const std::string& title, const std::string& body);

}  // namespace zt::report
