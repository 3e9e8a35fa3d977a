// One optimizer step of a click model on rank `rank` of `ranks`: its `accum` micro-batches of
// `micro` samples, taken in the global sample order (DESIGN.md), then the update. index_ids: the
// batches carry the distinct-id index as the data thread prepares it (index_distinct_ids), so
// sharded tables take it instead of deduplicating themselves.
#pragma once

#include "data/click/click_dataset.h"
#include "data/tokens/token_dataset.h"
#include "runtime/engine.h"

namespace zt {

inline StepStats click_step(Engine& engine, const ClickDataset& ds, ClickBatchBuffers& buf,
                            int64_t step, int64_t accum, int64_t micro, int rank, int ranks,
                            bool index_ids = false) {
    for (int64_t m = 0; m < accum; ++m) {
        ds.fill(global_sample_index(step, m, rank, micro, accum, ranks, 0), micro, buf);
        if (index_ids) index_distinct_ids(buf);
        const ClickBatch click = buf.view();
        Batch b;
        b.B = click.B;
        b.click = &click;
        engine.forward_backward(b);
    }
    return engine.step();
}

}  // namespace zt
