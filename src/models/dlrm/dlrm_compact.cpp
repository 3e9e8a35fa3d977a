// export --compact for DLRM (docs/pruning.md, "Compact export"): each table's rows whose every
// element is exactly 0 are removed, and an id map (models/dlrm/dlrm_id_map.h) sends the data's
// raw ids to the kept rows. The criterion is the weights, not the pruning mask: export reads a
// run's final weights (model.safetensors), which do not carry the optimizer's `pruned` state.
// After rows pruning the zero rows are the pruned ones (a trained row that was not pruned is not
// exactly 0), and removing any zero row keeps the function (Note [Removed rows in a bag]).
#include <map>

#include "models/dlrm/dlrm_family.h"
#include "models/dlrm/dlrm_id_map.h"
#include "util/error.h"

namespace zt {

CompactModel DlrmFamily::compact(std::span<const NamedTensorF32> params,
                                 const std::string& weights_path) const {
    const DlrmOptions& m = model_;
    ZT_CHECK(!m.embedding.enabled,
             "export --compact: the tables are placed by the \"embedding\" section (sharded or "
             "dynamic tables, outside the parameter arena); DLRM compacts tables that are dense "
             "parameters, the ones rows pruning prunes: train without the \"embedding\" section");
    std::map<std::string, const NamedTensorF32*> by_name;
    for (const NamedTensorF32& p : params) by_name[p.name] = &p;
    const size_t K = m.tables.size();
    std::vector<std::vector<uint8_t>> removed(K);
    std::vector<int64_t> removed_count(K, 0);
    int64_t removed_total = 0;
    for (size_t k = 0; k < K; ++k) {
        const DlrmTable& t = m.tables[k];
        ZT_CHECK(t.id_map.empty(), "export --compact: table ", k,
                 " is compacted already (model.tables[", k,
                 "].id_map); compact the model it came from instead");
        const auto it = by_name.find(dlrm_table_name(k));
        ZT_CHECK(it != by_name.end(), "export --compact: no parameter ", dlrm_table_name(k));
        const NamedTensorF32& p = *it->second;
        ZT_ASSERT(p.shape == std::vector<int64_t>({t.rows, t.dim}), "export --compact: ", p.name,
                  " has shape ", weight_shape_str(p.shape));
        removed[k] = zero_rows(p.data, t.rows, t.dim);
        int64_t n = 0;
        for (uint8_t r : removed[k]) n += r;
        if (n == t.rows) {  // a table keeps one row (rows >= 1); it is 0 either way
            removed[k][0] = 0;
            --n;
        }
        removed_count[k] = n;
        removed_total += n;
    }
    ZT_CHECK(removed_total > 0,
             "export --compact: no row of any embedding table is all zero, so there is nothing "
             "to remove (rows pruning, compression.pruning.type \"rows\", zeroes the rows "
             "--compact removes; was this run pruned?); export without --compact");
    CompactModel out;
    out.whole_model = true;
    out.index_path = dlrm_id_map_path(weights_path);
    DlrmOptions small = m;
    std::string summary;
    for (const NamedTensorF32& p : params) {
        int64_t n = 1;
        for (int64_t d : p.shape) n *= d;
        size_t k = K;
        for (size_t i = 0; i < K; ++i)
            if (p.name == dlrm_table_name(i) && removed_count[i] > 0) k = i;
        out.names.push_back(p.name);
        if (k == K) {
            out.shapes.push_back(p.shape);
            out.data.emplace_back(p.data, p.data + n);
            continue;
        }
        const DlrmTable& t = m.tables[k];
        std::vector<float> rows;
        std::vector<int32_t> map(static_cast<size_t>(t.rows), -1);
        int32_t kept = 0;
        for (int64_t r = 0; r < t.rows; ++r) {
            if (removed[k][static_cast<size_t>(r)]) continue;
            rows.insert(rows.end(), p.data + r * t.dim, p.data + (r + 1) * t.dim);
            map[static_cast<size_t>(r)] = kept++;
        }
        out.shapes.push_back({kept, t.dim});
        out.data.push_back(std::move(rows));
        out.index_names.push_back(dlrm_id_map_name(k));
        out.index_data.push_back(std::move(map));
        DlrmTable& s = small.tables[k];
        s.rows = kept;
        s.id_range = t.rows;
        s.id_map = out.index_path;
        summary += str_cat(summary.empty() ? "" : ", ", "table ", k, ": ", removed_count[k],
                           " of ", t.rows);
    }
    out.model = DlrmFamily(small, data_).describe_json();
    out.summary = str_cat("removed ", removed_total, " all-zero embedding rows (", summary,
                          "); id maps in ", out.index_path);
    return out;
}

}  // namespace zt
