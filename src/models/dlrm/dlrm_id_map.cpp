#include "models/dlrm/dlrm_id_map.h"

#include <cstring>

#include "checkpoint/safetensors.h"
#include "models/dlrm/dlrm.h"
#include "models/named_tensor.h"
#include "util/error.h"

namespace zt {

std::string dlrm_id_map_name(size_t k) { return str_cat("emb_l.", k, ".id_map"); }

std::string dlrm_id_map_path(const std::string& weights_path) {
    std::string base = weights_path;
    const std::string ext = ".safetensors";
    if (base.size() > ext.size() && base.ends_with(ext)) base.resize(base.size() - ext.size());
    return base + ".id_map.safetensors";
}

std::vector<int32_t> read_dlrm_id_map(const DlrmTable& t, size_t k) {
    const std::string key = str_cat("model.tables[", k, "].id_map");
    const std::string name = dlrm_id_map_name(k);
    const SafetensorsFile file(t.id_map);
    const SafetensorsTensor* st = file.find(name);
    ZT_CHECK(st, key, ": ", t.id_map, " holds no tensor '", name,
             "'; expected the id maps export --compact wrote for this model");
    ZT_CHECK((st->dtype == "I32" || st->dtype == "I64") && st->shape.size() == 1 &&
                 st->shape[0] == t.id_range,
             key, ": tensor '", name, "' of ", t.id_map, " is ", st->dtype, " ",
             weight_shape_str(st->shape), "; expected I32 or I64 [", t.id_range,
             "] (one entry per raw id, model.tables[", k, "].id_range)");
    const std::span<const std::byte> bytes = file.data(name);
    std::vector<int32_t> map(static_cast<size_t>(t.id_range));
    std::vector<uint8_t> named(static_cast<size_t>(t.rows), 0);
    for (size_t i = 0; i < map.size(); ++i) {
        int64_t v = 0;
        if (st->dtype == "I32") {
            int32_t x;
            std::memcpy(&x, bytes.data() + i * 4, 4);  // maybe unaligned (docs of data())
            v = x;
        } else {
            std::memcpy(&v, bytes.data() + i * 8, 8);
        }
        ZT_CHECK(v >= -1 && v < t.rows, key, ": raw id ", i, " maps to ", v,
                 "; expected -1 (a removed row) or a row in [0, ", t.rows, ")");
        if (v >= 0) {
            ZT_CHECK(!named[static_cast<size_t>(v)], key, ": row ", v,
                     " is named by two raw ids; each kept row has exactly one");
            named[static_cast<size_t>(v)] = 1;
        }
        map[i] = static_cast<int32_t>(v);
    }
    for (int64_t r = 0; r < t.rows; ++r)
        ZT_CHECK(named[static_cast<size_t>(r)], key, ": no raw id maps to row ", r, " of ", t.rows,
                 "; model.tables[", k, "].rows must be the id map's kept rows");
    return map;
}

// Note [Removed rows in a bag]
// The masked model looked a removed (all-zero) row up like any other: with sum pooling it added
// exact zeros (x + 0 = x, and fma(0, w, x) = x with per-sample weights), so dropping the id from
// its bag gives the same bits. Mean pooling divided the bag's sum by its raw id count, removed
// ids included: the compact bag keeps that count as sum pooling with weights 1 / count, equal
// within fp32 rounding (one rounding per id instead of one per bag), and the same gradient
// (1 / count per id) in backward. A bag whose every id was removed is empty: zeros, as before.
MappedBags map_bags(std::span<const int32_t> id_map, std::span<const int64_t> ids,
                    std::span<const int64_t> offsets, std::span<const float> weights,
                    ops::BagPooling pooling, const std::string& table) {
    const bool mean = pooling == ops::BagPooling::kMean;
    ZT_CHECK(weights.empty() || !mean, "embedding_bag: ", weights.size(),
             " per-sample weights with mean pooling; weights need sum pooling (as in PyTorch)");
    ZT_CHECK(!offsets.empty(), table, ": a batch without bag offsets");
    MappedBags out;
    const size_t B = offsets.size() - 1;
    out.ids.reserve(ids.size());
    out.offsets.reserve(offsets.size());
    out.offsets.push_back(0);
    const bool weighted = mean || !weights.empty();
    for (size_t b = 0; b < B; ++b) {
        const auto p0 = static_cast<size_t>(offsets[b]), p1 = static_cast<size_t>(offsets[b + 1]);
        ZT_CHECK(p0 <= p1 && p1 <= ids.size(), table, ": bag offsets ", p0, "..", p1,
                 " outside the batch's ", ids.size(), " ids");
        const float scale = mean && p1 > p0 ? 1.0f / static_cast<float>(p1 - p0) : 1.0f;
        for (size_t p = p0; p < p1; ++p) {
            const int64_t raw = ids[p];
            ZT_CHECK(raw >= 0 && static_cast<uint64_t>(raw) < id_map.size(), table, ": raw id ",
                     raw, " is outside the id map's range [0, ", id_map.size(),
                     ") (model.tables[K].id_range: the ids of the data the table was compacted "
                     "from)");
            const int32_t row = id_map[static_cast<size_t>(raw)];
            if (row < 0) continue;
            out.ids.push_back(row);
            if (weighted) out.weights.push_back(mean ? scale : weights[p]);
        }
        out.offsets.push_back(static_cast<int64_t>(out.ids.size()));
    }
    return out;
}

std::vector<uint8_t> zero_rows(const float* table, int64_t rows, int64_t dim) {
    std::vector<uint8_t> out(static_cast<size_t>(rows), 1);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < dim && out[static_cast<size_t>(r)]; ++c)
            out[static_cast<size_t>(r)] = table[r * dim + c] == 0.0f;
    return out;
}

}  // namespace zt
