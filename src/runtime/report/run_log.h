// Reading a run directory for `zerotrain report`: metrics.jsonl (DESIGN.md, Contracts: Metrics),
// restarts.jsonl (the supervisor's log: time, attempt, cause per line) and config.json. Tolerant:
// a line that does not parse, or a field of the wrong type, is noted as a problem with its line
// number and the rest is read; a missing number reads as NaN. Error lines ({"error", "step"})
// are kept for the report to show.
#pragma once

#include <cmath>
#include <cstdint>
#include <istream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace zt::report {

struct CommKindRecord {
    int64_t count = 0;
    int64_t bytes = 0;
    double seconds = 0;
};

// One channel's compressed traffic on a step line (docs/compression.md, "Metrics"): a
// "compression" entry (gradients, momentum, weights) or a "comm_compression" entry (embedding,
// pipeline). NaN: absent.
struct CompressionRecord {
    std::string codec;  // "int8"; "forward fp16, backward bf16" for the two-way channels
    double raw_bytes = NAN, wire_bytes = NAN, ratio = NAN, relative_error = NAN;
};

struct RankRecord {
    int64_t rank = 0;
    double comm_s = 0;                   // exposed communication
    double step_s, compute_s, io_s;      // NaN when the line does not carry them
    std::map<std::string, int64_t> mem;  // category -> bytes, and "peak"
};

struct StepRecord {
    int64_t step = 0;
    double loss, lr, grad_norm, step_time_s, tokens_per_s, mfu_flops_per_s, comm_s;  // NaN: absent
    double loss_scale;                // NaN unless fp16
    double mfu;                       // fraction of the measured GEMM ceiling; NaN when unknown
    std::vector<int64_t> stragglers;  // ranks named slow at this line
    bool skipped = false;
    std::map<std::string, int64_t> mem;  // category -> bytes; "peak", "reserved", "fragmentation"
    std::map<std::string, CommKindRecord> comm;
    std::vector<RankRecord> ranks;   // every steps_per_print steps, on several ranks
    std::vector<double> unique_ids;  // data.unique_ids: distinct ids per table (click models)
    // Sharded embedding tables (`embedding`): rows touched per table over the group, bytes the
    // ranks sent in the exchanges, the slowest rank's seconds in them (NaN: absent).
    std::map<std::string, double> table_rows;
    double alltoall_bytes = NAN, alltoall_s = NAN;
    // The plan field (docs/planner.md): the planner's predicted step time and peak bytes for
    // the run's layout (NaN: absent; step time is predicted only with a calibration profile).
    double plan_step_s = NAN, plan_peak_bytes = NAN;
    // Compressed channels by name: "gradients", "momentum", "weights" (compression.*),
    // "embedding" (embedding.comm_compression), "pipeline" (pipeline.comm_compression).
    std::map<std::string, CompressionRecord> compression;
    double cross_host_bytes = NAN;  // comm_cross_host_bytes (comm.hierarchical)
};

struct EvalRecord {
    int64_t step = 0;
    double eval_loss = 0;
    std::map<std::string, double> extra;  // the line's other numeric eval_* fields (eval_auc, ...)
};

struct ErrorRecord {
    int64_t step = -1;  // steps completed; -1 when absent
    std::string message;
};

struct RestartRecord {
    std::string time;     // as written (a number is shown as its JSON text)
    std::string attempt;  // as written
    std::string cause;
    std::string resumed_from;  // the step it continued from; "-" when unknown
    std::string recovery_s;    // seconds to the restart's first step; "-" when it took none
};

struct LogProblem {
    std::string file;
    int64_t line = 0;  // 1-based
    std::string what;
};

struct RunLog {
    std::vector<StepRecord> steps;
    std::vector<EvalRecord> evals;
    std::vector<ErrorRecord> errors;
    std::vector<LogProblem> problems;
    bool samples = false;  // the rate was samples_per_s (a model without tokens)
};

// The memory categories in the pool's order, then any other keys a line carried.
std::vector<std::string> memory_categories();

RunLog parse_metrics(std::istream& in, const std::string& file_name = "metrics.jsonl");
std::vector<RestartRecord> parse_restarts(std::istream& in, std::vector<LogProblem>* problems,
                                          const std::string& file_name = "restarts.jsonl");

// What `zerotrain report RUN_DIR` reads. metrics.jsonl must exist; the others are optional.
struct RunDirContents {
    std::string dir;
    RunLog log;
    std::optional<nlohmann::json> config;                // config.json
    std::optional<std::vector<RestartRecord>> restarts;  // restarts.jsonl when present
};
RunDirContents read_run_dir(const std::string& dir);

}  // namespace zt::report
