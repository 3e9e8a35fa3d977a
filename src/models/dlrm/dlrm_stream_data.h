// DLRM's run data from a stream (data.stream, docs/streaming.md): click records from a directory of
// ZTCLICK parts that keep arriving (data/click/click_stream.h), trained in arrival order, with
// counters for the records waiting and the freshness of the last checkpoint.
#pragma once

#include <memory>

#include "models/dlrm/dlrm_family.h"

namespace zt {

std::unique_ptr<RunData> open_dlrm_stream(const DlrmOptions& model, const DlrmDataOptions& data,
                                          const DataContext& ctx);

}  // namespace zt
