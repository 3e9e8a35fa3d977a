#include "runtime/profiler/run_profilers.h"

#include <cstdio>
#include <fstream>

#include "runtime/engine.h"
#include "util/error.h"

namespace zt {

namespace {

void print(const std::string& text) {
    if (text.empty()) return;
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
}

CommStats delta(const CommStats& now, const CommStats& before) {
    CommStats d;
    for (int k = 0; k < kCollectiveKindCount; ++k) {
        d.count[k] = now.count[k] - before.count[k];
        d.bytes_sent[k] = now.bytes_sent[k] - before.bytes_sent[k];
        d.seconds[k] = now.seconds[k] - before.seconds[k];
    }
    return d;
}

}  // namespace

RunProfilers::RunProfilers(const TrainConfig& cfg, Engine& engine, Communicator* comm)
    : cfg_(cfg),
      comm_(comm),
      root_(!comm || comm->rank() == 0),
      comms_(cfg.comms_logger, comm ? comm->rank() : 0) {
    if (cfg.flops_profiler.enabled && root_)
        flops_ = std::make_unique<FlopsProfiler>(
            engine.model(), engine.pool(),
            [family = cfg.model, B = cfg.micro_batch](const Module& m, bool root) {
                return family->module_flops(m, B, root);
            });
}

void RunProfilers::before_step(int64_t step) {
    if (flops_ && step + 1 == cfg_.flops_profiler.profile_step) flops_->start();
    if (comm_) before_ = comm_->stats();
}

void RunProfilers::after_step(int64_t step, double step_s) {
    if (flops_ && step + 1 == cfg_.flops_profiler.profile_step) {
        flops_->stop();
        const std::string text =
            format_flops_profile(flops_->profile(step + 1, step_s), cfg_.flops_profiler);
        const std::string& path = cfg_.flops_profiler.output_file;
        if (path.empty()) {
            print(text);
        } else {
            std::ofstream out(path);
            out << text;
            ZT_CHECK(out.good(), "flops_profiler.output_file: cannot write ", path);
        }
    }
    if (comm_ && comms_.speaks()) {
        const CommStats now = comm_->stats();
        print(comms_.after_step(step + 1, cfg_.steps_per_print, delta(now, before_), now));
    }
}

void RunProfilers::finish() {
    if (comms_.speaks())
        print(comm_ ? comms_.summary(comm_->stats())
                    : "comms logger: one process, no collectives\n");
}

}  // namespace zt
