#include "runtime/run_weights.h"

#include <algorithm>
#include <numeric>
#include <sstream>

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

// Pipeline parallelism: each stage's whole (tp-assembled) tensors travel to stage 0 over the
// pipeline group: first their names and shapes as text, then their values. A tied copy (the
// head's wte on the last stage) is the same as the first stage's and stays home.
void gather_stages(Engine& engine, std::vector<NamedTensorF32>& named, std::vector<float>& whole,
                   std::vector<float>& storage, std::vector<std::string>& names) {
    Communicator* pp = engine.options().pp;
    const int p = pp->size();
    std::string header;
    std::vector<float> values;
    const bool first = pp->rank() == 0;
    for (const NamedTensorF32& t : named) {
        const std::vector<Parameter*>& tied = engine.tied_parameters();
        if (!first && std::any_of(tied.begin(), tied.end(),
                                  [&](const Parameter* p) { return p->name == t.name; }))
            continue;
        header += t.name;
        for (int64_t d : t.shape) header += str_cat(" ", d);
        header += "\n";
        values.insert(values.end(), t.data, t.data + shape_numel(t.shape));
    }
    auto gather_counts = [&](int64_t mine) {
        std::vector<int64_t> all(static_cast<size_t>(p));
        pp->all_gather(&mine, all.data(), std::vector<int64_t>(static_cast<size_t>(p), 1),
                       CommType::kI64)
            ->wait();
        return all;
    };
    const std::vector<int64_t> hc = gather_counts(static_cast<int64_t>(header.size()));
    const std::vector<int64_t> vc = gather_counts(static_cast<int64_t>(values.size()));
    std::string headers(static_cast<size_t>(std::accumulate(hc.begin(), hc.end(), int64_t{0})),
                        '\0');
    storage.assign(static_cast<size_t>(std::accumulate(vc.begin(), vc.end(), int64_t{0})), 0.0f);
    pp->all_gather(header.data(), headers.data(), hc, CommType::kU8)->wait();
    pp->all_gather(values.data(), storage.data(), vc, CommType::kF32)->wait();
    whole.clear();
    named.clear();
    names.clear();
    std::istringstream lines(headers);
    std::vector<Shape> shapes;
    for (std::string line; std::getline(lines, line);) {
        std::istringstream f(line);
        std::string name;
        f >> name;
        Shape shape;
        for (int64_t d; f >> d;) shape.push_back(d);
        names.push_back(name);
        shapes.push_back(shape);
    }
    int64_t at = 0;
    for (size_t i = 0; i < names.size(); ++i) {
        named.push_back({names[i], shapes[i], storage.data() + at});
        at += shape_numel(shapes[i]);
    }
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
    std::vector<NamedTensorF32> named = named_params(engine, whole.data());
    std::vector<float> storage;
    std::vector<std::string> names;  // owns the gathered names
    if (engine.options().pp) gather_stages(engine, named, whole, storage, names);
    if (!root) return;
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
