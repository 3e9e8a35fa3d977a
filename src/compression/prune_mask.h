// Pruning masks from weights (pure; docs/pruning.md). A target is one weight matrix of the
// parameter arena: rows x cols elements at `offset`, row-major (a Linear's [out, in]). Masks are
// bytes over the whole arena, 1 where the weight is pruned. Scores are |w|, or -1 for a weight
// pruned already. Ties go by arena position (lower pruned first), so every rank computes the
// same mask from the same scores.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace zt {

struct PruneTarget {
    std::string name;
    int64_t offset = 0;  // arena element of [0, 0]
    int64_t rows = 0, cols = 0;
    int64_t numel() const { return rows * cols; }
};

// The number of a target set's elements pruned at sparsity s: floor(s x n).
int64_t prune_count(double sparsity, int64_t numel);

// Magnitude pruning: keeps every pruned weight (score < 0) pruned and adds the lowest-scored
// others until prune_count(sparsity, n) are pruned: over all targets together (global) or in
// each target. pruned: whole-arena bytes, updated in place.
void magnitude_mask(std::span<const float> scores, std::span<const PruneTarget> targets,
                    double sparsity, bool global, std::vector<uint8_t>& pruned);

// N:M pruning: in each row, every block of m consecutive weights (the last block of a row may
// be shorter) keeps its n highest scores and prunes the rest; a weight pruned earlier scores 0
// and may come back. pruned: whole-arena bytes, its targets' elements rewritten.
void nm_mask(std::span<const float> scores, std::span<const PruneTarget> targets, int n, int m,
             std::vector<uint8_t>& pruned);

}  // namespace zt
