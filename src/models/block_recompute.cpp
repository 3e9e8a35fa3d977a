#include "models/block_recompute.h"

#include "util/error.h"

namespace zt {

const char* block_recompute_name(BlockRecompute r) {
    switch (r) {
        case BlockRecompute::kNone:
            return "none";
        case BlockRecompute::kSelective:
            return "selective";
        case BlockRecompute::kFull:
            return "full";
    }
    return "?";
}

std::optional<BlockRecompute> parse_block_recompute(std::string_view name) {
    for (BlockRecompute r : kBlockRecomputes)
        if (name == block_recompute_name(r)) return r;
    return std::nullopt;
}

std::vector<BlockRecompute> block_recomputes_from_json(const nlohmann::json& j,
                                                       const std::string& key) {
    ZT_CHECK(j.is_array(), key,
             ": expected an array with one of \"none\", \"selective\", \"full\" per block, "
             "got ",
             j.dump());
    std::vector<BlockRecompute> out;
    for (size_t i = 0; i < j.size(); ++i) {
        const nlohmann::json& e = j[i];
        std::optional<BlockRecompute> r;
        if (e.is_string()) r = parse_block_recompute(e.get<std::string>());
        ZT_CHECK(r.has_value(), key, "[", i,
                 "]: expected \"none\", \"selective\" or \"full\", got ", e.dump());
        out.push_back(*r);
    }
    return out;
}

nlohmann::json block_recomputes_json(std::span<const BlockRecompute> blocks) {
    nlohmann::json j = nlohmann::json::array();
    for (BlockRecompute r : blocks) j.push_back(block_recompute_name(r));
    return j;
}

std::string block_recomputes_label(std::span<const BlockRecompute> blocks) {
    std::string out;
    for (size_t i = 0; i < blocks.size();) {
        size_t j = i;
        while (j + 1 < blocks.size() && blocks[j + 1] == blocks[i]) ++j;
        if (!out.empty()) out += ", ";
        out += str_cat(block_recompute_name(blocks[i]), " ", i);
        if (j > i) out += str_cat("-", j);
        i = j + 1;
    }
    return out;
}

}  // namespace zt
