// The run report's "Compressed communication" section (docs/report.md): per channel that sent
// bytes through a codec (docs/compression.md: gradients, 1-bit Adam's momentum, quantized ZeRO-3
// weights, embedding all-to-alls, pipeline sends), bytes per step before and after encoding,
// their ratio, the decoded values' relative error, and plots of them per step; the bytes sent
// across hosts under comm.hierarchical. Empty when nothing was sent through a codec (one rank)
// and no cross-host bytes were counted.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/report/run_log.h"

namespace zt::report {

struct CompressionSummary {
    std::string channel;       // the metrics key: "gradients", "weights", "embedding", ...
    std::string codec;         // as the last line with the channel names it
    int64_t steps = 0;         // step lines that carry the channel
    double raw_per_step = 0;   // mean over those lines: what the plain collectives would send
    double wire_per_step = 0;  // mean: what was sent
    double ratio = NAN;        // total raw over total wire; NaN when nothing was sent
    double error_median = NAN, error_last = NAN;  // relative_error over the lines carrying it
};

// Per channel that sent anything, in the order gradients, momentum, weights, embedding,
// pipeline, then others.
std::vector<CompressionSummary> compression_summary(const RunLog& log);

// The section with its <h2>, table (id table-compression), cross-host table (id
// table-cross-host) and plots (plot-compression-wire, plot-compression-error); "" when there is
// nothing to show.
std::string compression_section(const RunLog& log);

}  // namespace zt::report
