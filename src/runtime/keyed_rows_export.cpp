#include "runtime/keyed_rows_export.h"

#include "checkpoint/safetensors.h"
#include "util/error.h"

namespace zt {

std::string keyed_rows_path(const std::string& weights_path) {
    const std::string ext = ".safetensors";
    std::string base = weights_path;
    if (base.size() >= ext.size() && base.compare(base.size() - ext.size(), ext.size(), ext) == 0)
        base.resize(base.size() - ext.size());
    return base + ".dynamic" + ext;
}

bool has_keyed_rows(const SparseParams& sp) {
    for (size_t i = 0; i < sp.names().size(); ++i)
        if (sp.keyed(i)) return true;
    return false;
}

void write_keyed_rows(SparseParams& sp, const std::string& path, bool root) {
    struct Table {
        std::string base;
        int64_t dim = 0;
        std::vector<uint64_t> ids, evicted;
        std::vector<float> weight, def;
    };
    std::vector<Table> tables;
    const std::vector<std::string> names = sp.names();
    for (size_t i = 0; i < names.size(); ++i) {
        if (!sp.keyed(i)) continue;
        Table t;
        const std::string suffix = ".weight";
        t.base = names[i];
        if (t.base.size() > suffix.size() &&
            t.base.compare(t.base.size() - suffix.size(), suffix.size(), suffix) == 0)
            t.base.resize(t.base.size() - suffix.size());
        t.dim = sp.shape(i)[1];
        t.weight = sp.gather(i, 0);  // collective; then the ids of its rows
        t.ids = sp.row_ids(i);
        t.evicted = sp.take_deleted(i);
        t.def = sp.unadmitted_row(i);
        ZT_ASSERT(t.weight.size() == t.ids.size() * static_cast<size_t>(t.dim),
                  "keyed rows and ids disagree");
        tables.push_back(std::move(t));
    }
    if (!root) return;
    SafetensorsWriter w;
    for (const Table& t : tables) {
        const auto n = static_cast<int64_t>(t.ids.size());
        w.add(t.base + ".ids", "U64", {n}, t.ids.data(), t.ids.size() * 8);
        w.add(t.base + ".weight", "F32", {n, t.dim}, t.weight.data(), t.weight.size() * 4);
        w.add(t.base + ".evicted", "U64", {static_cast<int64_t>(t.evicted.size())},
              t.evicted.data(), t.evicted.size() * 8);
        if (!t.def.empty())
            w.add(t.base + ".default", "F32", {t.dim}, t.def.data(), t.def.size() * 4);
    }
    w.add_metadata("format", "zerotrain-keyed-rows");
    w.add_metadata("version", "1");
    w.write(path);
}

}  // namespace zt
