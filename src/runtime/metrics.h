// metrics.jsonl writer (DESIGN.md, Contracts: Metrics): one JSON object per optimizer step, skipped
// steps included; evaluation lines carry eval_loss. Each line is flushed as written so a crash loses
// at most the line being written.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "tensor/memory.h"

namespace zt {

class MetricsWriter {
public:
    // keep_through_step >= 0 (a resumed run): keeps the file's lines of steps up to that one
    // and appends after them; -1: starts the file afresh.
    explicit MetricsWriter(const std::string& path, int64_t keep_through_step = -1);
    ~MetricsWriter();
    MetricsWriter(const MetricsWriter&) = delete;
    MetricsWriter& operator=(const MetricsWriter&) = delete;
    void write(const nlohmann::json& line);

private:
    std::FILE* file_ = nullptr;
    std::string path_;
};

// {"params": bytes, ..., "peak": bytes, "reserved": bytes, "fragmentation": bytes} from a pool's
// stats (fragmentation: reserved minus live).
nlohmann::json memory_json(const MemoryStats& stats);

}  // namespace zt
