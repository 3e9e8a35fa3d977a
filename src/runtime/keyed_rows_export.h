// The rows of keyed sparse tensors (dynamic embedding tables, nn/sparse_params.h) for serving, as
// one safetensors file beside the weights (docs/embedding-dynamic.md, Export): per table
// "emb_l.K": "emb_l.K.ids" U64 (n) ascending, "emb_l.K.weight" F32 (n, dim) the rows of those
// ids, "emb_l.K.evicted" U64 (e) ids dropped since the last export that are not rows now (a
// server deletes them), and "emb_l.K.default" F32 (dim) when unadmitted ids read a shared row
// (absent: zeros). Metadata "format" = "zerotrain-keyed-rows", "version" = "1". Taking the
// evictions empties the log, so each export lists the deletions since the previous one.
#pragma once

#include <string>

#include "nn/sparse_params.h"

namespace zt {

// "DIR/model.safetensors" -> "DIR/model.dynamic.safetensors".
std::string keyed_rows_path(const std::string& weights_path);

// Whether any tensor of sp is keyed.
bool has_keyed_rows(const SparseParams& sp);

// Collective over sp's group: gathers the keyed tensors of sp; root writes them to path,
// atomically.
void write_keyed_rows(SparseParams& sp, const std::string& path, bool root);

}  // namespace zt
