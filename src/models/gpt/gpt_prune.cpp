// GPT's units for structured pruning (compression/prune_groups.h, docs/pruning.md): a head of
// block l is D = head_size rows of each of c_attn's q, k and v blocks (weight and bias) and D
// columns of attn.c_proj; an MLP channel is one row of c_fc (weight and bias) and one column of
// mlp.c_proj. With all of them 0 the unit adds exactly nothing to the residual stream (v = 0, so
// the head's output is 0; gelu(0) = 0), which is what lets export --compact remove it.
#include "models/gpt/gpt.h"

namespace zt {

std::vector<PruneUnitGroup> Gpt::prune_groups() const {
    // This stage's blocks, this tp rank's heads and channels (compression/prune_view.h makes
    // them whole).
    const int64_t H = options_.n_heads / options_.tp.size(), D = options_.head_size();
    std::vector<PruneUnitGroup> out;
    for (const Block* bp : transformer.h) {
        if (bp == nullptr) continue;  // another stage's
        const Block& b = *bp;
        const std::string& name = b.name();
        const Parameter& qkv = b.attn.c_attn.weight;
        const Parameter& proj = b.attn.c_proj.weight;
        PruneUnitGroup heads{name + ".attn", "heads", H, {}};
        heads.slices.push_back({qkv.offset, qkv.shape[0], qkv.shape[1], true, D, 3});
        if (b.attn.c_attn.bias)
            heads.slices.push_back({b.attn.c_attn.bias->offset, qkv.shape[0], 1, true, D, 3});
        heads.slices.push_back({proj.offset, proj.shape[0], proj.shape[1], false, D, 1});
        out.push_back(std::move(heads));
        const Parameter& fc = b.mlp.c_fc.weight;
        const Parameter& down = b.mlp.c_proj.weight;
        PruneUnitGroup channels{name + ".mlp", "channels", fc.shape[0], {}};
        channels.slices.push_back({fc.offset, fc.shape[0], fc.shape[1], true, 1, 1});
        if (b.mlp.c_fc.bias)
            channels.slices.push_back({b.mlp.c_fc.bias->offset, fc.shape[0], 1, true, 1, 1});
        channels.slices.push_back({down.offset, down.shape[0], down.shape[1], false, 1, 1});
        out.push_back(std::move(channels));
    }
    return out;
}

}  // namespace zt
