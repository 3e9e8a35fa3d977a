#include "runtime/checkpoint_read.h"

#include <algorithm>
#include <memory>

#include "checkpoint/shards.h"

namespace zt {

namespace {

// The checkpoint's files of one pipeline stage's tensor-parallel part, as a manifest of their own.
Manifest part_manifest(const Manifest& m, int stage, int part) {
    Manifest p = m;
    p.files.clear();
    for (const CheckpointFile& f : m.files)
        if (f.tp_part == part && f.pp_stage == stage) p.files.push_back(f);
    return p;
}

// For each of the layout's parameters, its entry in the manifest by name (the first stage that
// lists it: a tied copy is read from the first stage's); throws naming one the checkpoint lacks.
std::vector<size_t> entries_by_name(const Manifest& m, const std::vector<Parameter*>& params,
                                    const std::string& where) {
    std::vector<size_t> out;
    for (const Parameter* p : params) {
        size_t i = 0;
        while (i < m.params.size() && m.params[i].name != p->name) ++i;
        ZT_CHECK(i < m.params.size(), where, " is of another model: it has no parameter '", p->name,
                 "'");
        out.push_back(i);
    }
    return out;
}

// This layout's tensor-parallel degree and part, from its split parameters (1 and 0 when none is).
std::pair<int64_t, int64_t> layout_part(const std::vector<Parameter*>& params) {
    for (const Parameter* p : params)
        if (p->split.sharded()) return {p->split.parts, p->split.part};
    return {1, 0};
}

ParamSplit manifest_split(const CheckpointParam& cp, int tp) {
    if (cp.split_dim < 0 || tp == 1) return ParamSplit{};
    return ParamSplit{cp.split_dim, tp, 0, cp.split_blocks};
}

}  // namespace

void check_checkpoint_params(const Manifest& m, const std::vector<Parameter*>& params,
                             const std::string& where, bool stage) {
    if (m.pp > 1 || stage) {  // pipeline stages on either side: parameters match by name
        const std::vector<size_t> at = entries_by_name(m, params, where);
        for (size_t i = 0; i < params.size(); ++i) {
            const CheckpointParam& cp = m.params[at[i]];
            const Parameter* p = params[i];
            ZT_CHECK(cp.shape == p->global_shape(), where, " is of another model: its parameter '",
                     cp.name, "' is ", shape_str(cp.shape), ", this model's is ",
                     shape_str(p->global_shape()));
            const bool both = cp.split_dim >= 0 && p->split.sharded();
            ZT_CHECK(!both || (cp.split_dim == p->split.dim && cp.split_blocks == p->split.blocks),
                     where, ": parameter '", cp.name, "' is split along dimension ", cp.split_dim,
                     " there and along ", p->split.dim, " here");
        }
        return;
    }
    int64_t numel = 0;
    for (const Parameter* p : params) numel = std::max(numel, p->offset + p->numel());
    const auto [parts, part] = layout_part(params);
    (void)part;
    ZT_CHECK(m.params.size() == params.size(), where, " is of another model: ", m.params.size(),
             " parameters, this model has ", params.size());
    for (size_t i = 0; i < params.size(); ++i) {
        const CheckpointParam& cp = m.params[i];
        const Parameter* p = params[i];
        ZT_CHECK(cp.name == p->name && cp.shape == p->global_shape(), where,
                 " is of another model: its parameter ", i, " is '", cp.name, "' ",
                 shape_str(cp.shape), ", this model's is '", p->name, "' ",
                 shape_str(p->global_shape()));
        const bool both = cp.split_dim >= 0 && p->split.sharded();
        ZT_CHECK(!both || (cp.split_dim == p->split.dim && cp.split_blocks == p->split.blocks),
                 where, ": parameter '", cp.name, "' is split along dimension ", cp.split_dim,
                 " there and along ", p->split.dim, " here");
        if (m.tp == parts)
            ZT_CHECK(cp.offset == p->offset, where, " is of another model: its parameter '",
                     cp.name, "' is at offset ", cp.offset, ", this model's '", p->name,
                     "' at offset ", p->offset);
    }
    if (m.tp == parts)
        ZT_CHECK(m.numel == numel, where, " is of another model: ", m.numel,
                 " elements per part, this model has ", numel);
}

void read_checkpoint_range(const std::string& dir, const Manifest& m,
                           const std::vector<Parameter*>& params, int64_t lo, int64_t hi,
                           const std::vector<std::string>& names, const std::vector<float*>& outs,
                           const DirectIoOptions& io, bool stage) {
    const auto [parts, part] = layout_part(params);
    if (m.tp == parts && m.pp == 1 && !stage) {  // the same split: the part's shards, as they are
        const Manifest pm = part_manifest(m, 0, static_cast<int>(part));
        ShardReader reader(dir, pm, io);
        for (size_t t = 0; t < names.size(); ++t) reader.add(names[t], lo, hi, outs[t]);
        reader.run();
        return;
    }
    for (size_t t = 0; t < names.size(); ++t) std::fill(outs[t], outs[t] + (hi - lo), 0.0f);
    // Another split or pipeline stages: for each of the checkpoint's (stage, part), read the parts
    // of the parameters this range touches, then take the elements that part holds.
    const std::vector<size_t> at = entries_by_name(m, params, dir);
    for (int s = 0; s < m.pp; ++s)
        for (int q = 0; q < m.tp; ++q) {
            const Manifest pm = part_manifest(m, s, q);
            ShardReader reader(dir, pm, io);
            struct Pending {
                const Parameter* p;
                size_t param;
                int64_t b, e;  // the parameter's local elements in [lo, hi)
                std::vector<std::unique_ptr<float[]>> bufs;  // per tensor: the part's slice
            };
            std::vector<Pending> pending;
            for (size_t k = 0; k < params.size(); ++k) {
                const Parameter* p = params[k];
                const int64_t b = std::max(lo, p->offset) - p->offset;
                const int64_t e = std::min(hi, p->offset + p->numel()) - p->offset;
                const CheckpointParam& cp = m.params[at[k]];
                const ParamSplit old = manifest_split(cp, m.tp);
                if (b >= e || cp.stage != s || (q > 0 && !old.sharded()))
                    continue;  // held by another stage, or whole: part 0's copy
                const int64_t n = shape_numel(cp.shape) / old.parts;
                Pending pd{p, at[k], b, e, {}};
                for (const std::string& name : names) {
                    pd.bufs.emplace_back(new float[static_cast<size_t>(n)]);
                    reader.add(name, cp.offset, cp.offset + n, pd.bufs.back().get());
                }
                pending.push_back(std::move(pd));
            }
            reader.run();
            for (const Pending& pd : pending) {
                const CheckpointParam& cp = m.params[pd.param];
                const ParamSplit old = manifest_split(cp, m.tp);
                for (int64_t i = pd.b; i < pd.e; ++i) {
                    int64_t holder = 0;
                    const int64_t j =
                        split_local_index(cp.shape, old, pd.p->global_index(i), &holder);
                    if (holder != q) continue;
                    for (size_t t = 0; t < names.size(); ++t)
                        outs[t][pd.p->offset + i - lo] = pd.bufs[t][static_cast<size_t>(j)];
                }
            }
        }
}

}  // namespace zt
