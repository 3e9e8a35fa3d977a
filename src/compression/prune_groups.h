// Structured pruning's units (docs/pruning.md, "Structured"): an attention head or an MLP
// channel is a set of whole rows and columns of a few parameters of the arena. A model that can
// be pruned structurally (GPT) lists them per layer as groups of equal units; structured_mask
// (pure) prunes whole units, so every rank and layout computes the same mask from the same
// scores. Deliberately model-agnostic: the model says where its units are, this file only
// counts and scores them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace zt {

// One parameter's share of every unit of a group, the parameter seen as a row-major
// rows x cols matrix at arena element `offset` (a bias: rows x 1). Unit u holds rows
// [p rows/parts + u width, + width) of every part p (along_rows; c_attn's q, k, v are 3 parts),
// or columns [u width, + width) of every row (c_proj).
struct PruneSlice {
    int64_t offset = 0;
    int64_t rows = 0, cols = 0;
    bool along_rows = true;
    int64_t width = 1;
    int64_t parts = 1;
};

// The units of one layer: GPT's heads of block l ("heads") or its MLP channels ("channels").
struct PruneUnitGroup {
    std::string name;  // "transformer.h.0.attn"
    std::string kind;  // "heads" or "channels"
    int64_t units = 0;
    std::vector<PruneSlice> slices;
};

// Calls f(arena element) for every element of unit u of g, slice by slice, in arena order
// within a slice.
template <typename F>
void for_each_unit_element(const PruneUnitGroup& g, int64_t u, F&& f) {
    for (const PruneSlice& s : g.slices) {
        if (s.along_rows) {
            const int64_t part_rows = s.rows / s.parts;
            for (int64_t p = 0; p < s.parts; ++p) {
                const int64_t r0 = p * part_rows + u * s.width;
                for (int64_t i = s.offset + r0 * s.cols; i < s.offset + (r0 + s.width) * s.cols;
                     ++i)
                    f(i);
            }
        } else {
            for (int64_t r = 0; r < s.rows; ++r)
                for (int64_t c = u * s.width; c < (u + 1) * s.width; ++c)
                    f(s.offset + r * s.cols + c);
        }
    }
}

// A model whose layers have heads and channels to prune (models/gpt). Offsets are the
// parameters' arena offsets, so the engine asks after the arena is placed.
class StructuredPrunable {
  public:
    virtual ~StructuredPrunable() = default;
    virtual std::vector<PruneUnitGroup> prune_groups() const = 0;
};

// Structured pruning: in each group g, the units already pruned (every element scoring < 0)
// stay pruned and the lowest-scored others are added until counts[g] are pruned. A unit's score
// is the L2 norm of its elements' scores (|w|; elements scoring < 0 count 0); ties go to the
// lower unit. Every element of a pruned unit is marked 1 in `pruned` (whole-arena bytes), every
// element of a kept one 0; elements outside the groups are left as they are.
void structured_mask(std::span<const float> scores, std::span<const PruneUnitGroup> groups,
                     std::span<const int64_t> counts, std::vector<uint8_t>& pruned);

// Per group, how many of its units `pruned` marks whole (every element 1).
std::vector<int64_t> pruned_units(std::span<const PruneUnitGroup> groups,
                                  const std::vector<uint8_t>& pruned);

}  // namespace zt
