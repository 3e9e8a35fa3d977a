// parallel.pipeline (config_pipeline.h).
#include "runtime/config_pipeline.h"

#include <climits>

#include "comm/comm_precision.h"
#include "runtime/config.h"

namespace zt::config_detail {

void parse_pipeline(Section& parallel, PipelineConfig& p, std::optional<int64_t>& micro_batches) {
    const json* v = parallel.take("pipeline");
    if (!v) return;
    if (v->is_number()) {
        p.stages = static_cast<int>(parallel.get_int("pipeline", 1, 1, INT_MAX));
        return;
    }
    Section s = parallel.section("pipeline");
    p.stages = static_cast<int>(s.get_int("stages", 1, 1, INT_MAX));
    const std::string schedule =
        s.get_choice("schedule", "1f1b", {"gpipe", "1f1b", "interleaved", "zero_bubble"});
    p.schedule = parse_pipe_schedule(schedule);
    p.virtual_stages = static_cast<int>(s.get_int("virtual_stages", 1, 1, INT_MAX));
    if (s.has("micro_batches")) micro_batches = s.get_int("micro_batches", 1, 1, INT_MAX);
    if (const json* part = s.take("partition")) {
        if (part->is_string()) {
            s.get_choice("partition", "balanced", {"balanced"});
        } else {
            p.partition = s.get_int_list("partition", 1);
            p.partition_given = !p.partition.empty();
        }
    }
    parse_comm_precision(s, p.forward_comm, p.backward_comm);
    s.finish();
}

void resolve_pipeline(TrainConfig& c) {
    PipelineConfig& p = c.pipe;
    if (!p.active()) {
        ZT_CHECK(!p.partition_given && p.virtual_stages == 1,
                 "parallel.pipeline: partition and virtual_stages need stages > 1");
        ZT_CHECK(p.forward_comm == CodecKind::kF32 && p.backward_comm == CodecKind::kF32,
                 "parallel.pipeline.comm_precision: with 1 stage nothing travels between "
                 "stages; set stages > 1 or remove comm_precision");
        return;
    }
    const int64_t blocks = c.model->pipeline_blocks();
    ZT_CHECK(blocks > 0, "parallel.pipeline.stages = ", p.stages, ": ", c.model->name(),
             " has no pipeline split in this version; use 1 stage");
    const PipeOptions o = p.options(c.grad_accum);
    if (p.partition_given)
        check_partition(o, p.partition, blocks);
    else
        p.partition = balanced_partition(o, c.model->pipeline_costs());
    ZT_CHECK(c.zero.stage <= 1, "zero_optimization.stage = ", c.zero.stage,
             " with parallel.pipeline: this version pipelines with stage 0 or 1, whose "
             "gradients are reduced once after the last backward of the step; stages 2 and 3 "
             "partition each micro-batch's gradients as its backward runs, so the tied "
             "embedding's gradient is never whole on the first and last stage to be summed, and "
             "stage 3 gathers weights per module around passes the pipeline interleaves. Use "
             "stage 1 (the optimizer state partitioned over dp)");
}

}  // namespace zt::config_detail
