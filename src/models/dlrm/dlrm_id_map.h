// A compacted DLRM table's id map (docs/dlrm.md, "Compacted tables"; docs/pruning.md, "Compact
// export"): export --compact removes a table's all-zero rows and writes, beside the weights, the
// I32 tensor "emb_l.K.id_map" of id_range entries: raw id -> its row in the smaller table, or -1
// for a removed row. The compact model reads the same data as the model it came from and computes
// the same function (Note [Removed rows in a bag]). Left out: sharded and dynamic tables.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "autograd/ops.h"

namespace zt {

struct DlrmTable;

// "emb_l.K.id_map".
std::string dlrm_id_map_name(size_t k);
// OUT.safetensors -> OUT.id_map.safetensors: where export --compact writes the id maps.
std::string dlrm_id_map_path(const std::string& weights_path);

// Table k's id map from t.id_map, checked (zt::Error naming model.tables[k].id_map): an I32 or
// I64 vector of t.id_range entries, each -1 or a row in [0, t.rows), every row named exactly once.
std::vector<int32_t> read_dlrm_id_map(const DlrmTable& t, size_t k);

// The bags of one table with raw ids mapped to rows: ids of removed rows leave their bag (they
// contributed zeros). Mean pooling keeps the raw bag's count: the result is sum pooling with
// weights 1 / count. The bags are for sum pooling whatever `pooling` was. `table` names the
// table in errors.
struct MappedBags {
    std::vector<int32_t> ids;
    std::vector<int64_t> offsets;
    std::vector<float> weights;  // empty: none (sum pooling without per-sample weights)
};
MappedBags map_bags(std::span<const int32_t> id_map, std::span<const int64_t> ids,
                    std::span<const int64_t> offsets, std::span<const float> weights,
                    ops::BagPooling pooling, const std::string& table);

// The rows of a (rows, dim) table whose every element is exactly 0 (what export --compact
// removes), as flags.
std::vector<uint8_t> zero_rows(const float* table, int64_t rows, int64_t dim);

}  // namespace zt
