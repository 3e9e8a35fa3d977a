// Per-block activation checkpointing (activation_checkpointing.policy "blocks",
// docs/checkpointing.md): each of a model's blocks is recomputed whole ("full"), in its
// attention core only ("selective"), or not at all ("none"). The planner chooses such a list
// layer by layer under a memory budget (planner/layer_search.h); a family that supports it
// (ModelFamily::recomputes_blocks) trains it bit for bit like "none".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

enum class BlockRecompute : uint8_t { kNone, kSelective, kFull };

inline constexpr BlockRecompute kBlockRecomputes[] = {
    BlockRecompute::kNone, BlockRecompute::kSelective, BlockRecompute::kFull};

// "none", "selective", "full".
const char* block_recompute_name(BlockRecompute r);
std::optional<BlockRecompute> parse_block_recompute(std::string_view name);

// The config's list: a JSON array of those names (throws zt::Error (kInput) naming `key` and
// the bad entry otherwise).
std::vector<BlockRecompute> block_recomputes_from_json(const nlohmann::json& j,
                                                       const std::string& key);
nlohmann::json block_recomputes_json(std::span<const BlockRecompute> blocks);

// Runs of equal choices, for labels: "full 0-2, selective 3, none 4-7".
std::string block_recomputes_label(std::span<const BlockRecompute> blocks);

}  // namespace zt
