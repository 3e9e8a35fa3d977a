#include "runtime/run_weights.h"

#include "parallel/tensor_parallel_weights.h"

namespace zt {

namespace {

// The parameters as weight files see them, whole: views into a one-process arena.
std::vector<NamedTensorF32> named_params(Engine& engine, float* whole) {
    std::vector<NamedTensorF32> named;
    int64_t at = 0;
    for (Parameter* p : engine.arena().params()) {
        named.push_back({p->name, p->global_shape(), whole + at});
        at += shape_numel(p->global_shape());
    }
    return named;
}

}  // namespace

void save_weights(Engine& engine, const ModelFamily& family, const std::string& path, bool root) {
    std::vector<float> whole = engine.gather_master();
    const TensorParallel& tp = engine.options().tp;
    if (tp.active()) whole = tp_assemble(engine.arena().params(), whole.data(), tp);
    std::vector<std::vector<float>> sparse;
    SparseParams* sp = engine.sparse_params();
    std::vector<std::string> sparse_names = sp ? sp->names() : std::vector<std::string>{};
    for (size_t i = 0; i < sparse_names.size(); ++i) sparse.push_back(sp->gather(i, 0));
    if (!root) return;
    std::vector<NamedTensorF32> named = named_params(engine, whole.data());
    for (size_t i = 0; i < sparse_names.size(); ++i)
        named.push_back({sparse_names[i], sp->shape(i), sparse[i].data()});
    family.export_weights(path, named, "F32");
}

ImportedWeights import_weights(Engine& engine, const ModelFamily& family, const std::string& path) {
    ImportedWeights w;
    const std::vector<Parameter*>& params = engine.arena().params();
    const bool split = engine.options().tp.active();
    std::vector<float> whole(static_cast<size_t>(split ? whole_numel(params) : 0));
    w.arena.assign(static_cast<size_t>(engine.arena().padded_numel()), 0.0f);
    std::vector<NamedTensorF32> named = named_params(engine, split ? whole.data() : w.arena.data());
    if (SparseParams* sp = engine.sparse_params()) {
        const std::vector<std::string> names = sp->names();
        w.sparse.resize(names.size());
        for (size_t i = 0; i < names.size(); ++i) {
            w.sparse[i].assign(static_cast<size_t>(shape_numel(sp->shape(i))), 0.0f);
            named.push_back({names[i], sp->shape(i), w.sparse[i].data()});
        }
    }
    family.import_weights(path, named);
    if (split) tp_cut(params, whole.data(), w.arena.data());
    return w;
}

}  // namespace zt
