// export --compact for DLRM (docs/pruning.md, "Compact export"): each table's rows whose every
// element is exactly 0 are removed, and an id map (models/dlrm/dlrm_id_map.h) sends the data's
// raw ids to the kept rows. The criterion is the weights, not the pruning mask: export reads a
// run's final weights (model.safetensors), which do not carry the optimizer's `pruned` state.
// After rows pruning the zero rows are the pruned ones (a trained row that was not pruned is not
// exactly 0), and removing any zero row keeps the function (Note [Removed rows in a bag]).
#include <algorithm>
#include <map>

#include "models/dlrm/dlrm_family.h"
#include "models/dlrm/dlrm_id_map.h"
#include "util/error.h"

namespace zt {

namespace {

// The rows export --compact removes from table k (weight p): its all-zero rows, but a table keeps
// at least one row (rows >= 1; the one kept is 0 either way).
std::vector<uint8_t> rows_to_remove(const DlrmTable& t, size_t k, const NamedTensorF32& p) {
    ZT_CHECK(t.id_map.empty(), "export --compact: table ", k,
             " is compacted already (model.tables[", k,
             "].id_map); compact the model it came from instead");
    ZT_ASSERT(p.shape == std::vector<int64_t>({t.rows, t.dim}), "export --compact: ", p.name,
              " has shape ", weight_shape_str(p.shape));
    std::vector<uint8_t> removed = zero_rows(p.data, t.rows, t.dim);
    if (std::find(removed.begin(), removed.end(), uint8_t{0}) == removed.end()) removed[0] = 0;
    return removed;
}

// The kept rows of p, in order, and the id map: raw id -> its kept row, or -1.
void keep_rows(const DlrmTable& t, const NamedTensorF32& p, const std::vector<uint8_t>& removed,
               std::vector<float>& rows, std::vector<int32_t>& map) {
    map.assign(static_cast<size_t>(t.rows), -1);
    int32_t kept = 0;
    for (int64_t r = 0; r < t.rows; ++r) {
        if (removed[static_cast<size_t>(r)]) continue;
        rows.insert(rows.end(), p.data + r * t.dim, p.data + (r + 1) * t.dim);
        map[static_cast<size_t>(r)] = kept++;
    }
}

}  // namespace

CompactModel DlrmFamily::compact(std::span<const NamedTensorF32> params,
                                 const std::string& weights_path) const {
    const DlrmOptions& m = model_;
    ZT_CHECK(!m.embedding.enabled,
             "export --compact: the tables are placed by the \"embedding\" section (sharded or "
             "dynamic tables, outside the parameter arena); DLRM compacts tables that are dense "
             "parameters, the ones rows pruning prunes: train without the \"embedding\" section");
    std::map<std::string, size_t> table_of;  // "emb_l.K.weight" -> K
    std::vector<std::vector<uint8_t>> removed(m.tables.size());
    std::vector<int64_t> removed_count(m.tables.size(), 0);
    int64_t removed_total = 0;
    for (size_t k = 0; k < m.tables.size(); ++k) table_of[dlrm_table_name(k)] = k;
    for (const NamedTensorF32& p : params) {
        const auto it = table_of.find(p.name);
        if (it == table_of.end()) continue;
        const size_t k = it->second;
        removed[k] = rows_to_remove(m.tables[k], k, p);
        removed_count[k] = std::count(removed[k].begin(), removed[k].end(), uint8_t{1});
        removed_total += removed_count[k];
    }
    for (size_t k = 0; k < m.tables.size(); ++k)
        ZT_CHECK(!removed[k].empty(), "export --compact: no parameter ", dlrm_table_name(k));
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
        const auto it = table_of.find(p.name);
        out.names.push_back(p.name);
        if (it == table_of.end() || removed_count[it->second] == 0) {
            out.shapes.push_back(p.shape);
            out.data.emplace_back(p.data, p.data + shape_numel(p.shape));
            continue;
        }
        const size_t k = it->second;
        const DlrmTable& t = m.tables[k];
        DlrmTable& s = small.tables[k];
        s.rows = t.rows - removed_count[k];
        s.id_range = t.rows;
        s.id_map = out.index_path;
        out.shapes.push_back({s.rows, t.dim});
        keep_rows(t, p, removed[k], out.data.emplace_back(), out.index_data.emplace_back());
        out.index_names.push_back(dlrm_id_map_name(k));
        summary += str_cat(summary.empty() ? "" : ", ", "table ", k, ": ", removed_count[k], " of ",
                           t.rows);
    }
    out.model = DlrmFamily(small, data_).describe_json();
    out.summary = str_cat("removed ", removed_total, " all-zero embedding rows (", summary,
                          "); id maps in ", out.index_path);
    return out;
}

}  // namespace zt
