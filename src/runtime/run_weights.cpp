#include "runtime/run_weights.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>

#include "comm/gather_strings.h"
#include "parallel/tensor_parallel_weights.h"
#include "runtime/keyed_rows_export.h"
#include "runtime/streamed_gather.h"

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
                   std::vector<float>& storage) {
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
    std::string headers;
    for (const std::string& h : all_gather_strings(*pp, header)) headers += h;
    const size_t n = static_cast<size_t>(p);
    const int64_t count = static_cast<int64_t>(values.size());
    std::vector<int64_t> vc(n);
    pp->all_gather(&count, vc.data(), std::vector<int64_t>(n, 1), CommType::kI64)->wait();
    storage.assign(static_cast<size_t>(std::accumulate(vc.begin(), vc.end(), int64_t{0})), 0.0f);
    pp->all_gather(values.data(), storage.data(), vc, CommType::kF32)->wait();
    whole = std::vector<float>();  // this stage's copy, now in storage
    named.clear();
    std::istringstream lines(headers);
    int64_t at = 0;
    for (std::string line; std::getline(lines, line);) {
        std::istringstream f(line);
        NamedTensorF32 t;
        f >> t.name;
        for (int64_t d; f >> d;) t.shape.push_back(d);
        t.data = storage.data() + at;
        at += shape_numel(t.shape);
        named.push_back(std::move(t));
    }
}

// Pipeline parallelism: the file holds the whole model, the stage a part of it. Reads the whole
// model's tensors (the family's own check of names and shapes applies) and copies this stage's.
void import_into_stage(const ModelFamily& family, const std::string& path,
                       std::vector<NamedTensorF32>& mine) {
    const std::unique_ptr<Model> model = family.build();
    const std::vector<Parameter*> all = model->parameters();
    std::vector<float> buf(static_cast<size_t>(whole_numel(all)));
    std::vector<NamedTensorF32> named;
    int64_t at = 0;
    for (const Parameter* p : all) {
        named.push_back({p->name, p->global_shape(), buf.data() + at});
        at += shape_numel(p->global_shape());
    }
    family.import_weights(path, named);
    for (NamedTensorF32& t : mine) {
        const auto it = std::find_if(named.begin(), named.end(),
                                     [&](const NamedTensorF32& n) { return n.name == t.name; });
        ZT_ASSERT(it != named.end() && it->shape == t.shape, "stage parameter ", t.name,
                  " is not the whole model's");
        std::copy(it->data, it->data + shape_numel(t.shape), t.data);
    }
}

// Note [Master weights read from the tier]: where this rank holds the whole arena's master
// weights on a tier (offload_optimizer on one rank, or ZeRO stage 0; no tp or pp to assemble),
// the weights file is written a piece at a time straight from the tier: a model whose states
// exceed the machine's memory never needs its f32 weights whole in memory to be exported.
// Every rank decides alike (from the layout), so the collectives below stay matched.
bool master_read_from_tier(Engine& engine) {
    UpdateState& state = engine.update_state();
    return state.view(0) == nullptr && state.numel() == engine.arena().padded_numel() &&
           !engine.options().tp.active() && engine.options().pp == nullptr;
}

std::vector<NamedTensorF32> tier_params(Engine& engine) {
    std::vector<NamedTensorF32> named;
    UpdateState* state = &engine.update_state();
    int64_t at = 0;
    for (Parameter* p : engine.arena().params()) {
        const int64_t base = at;
        named.push_back({p->name, p->global_shape(), nullptr,
                         [state, base](int64_t first, int64_t count, float* dst) {
                             state->read(0, base + first, count, dst);
                         }});
        at += shape_numel(p->global_shape());
    }
    return named;
}

}  // namespace

void save_weights(Engine& engine, const ModelFamily& family, const std::string& path, bool root) {
    const bool from_tier = master_read_from_tier(engine);
    std::vector<float> whole = from_tier ? std::vector<float>{} : engine.gather_master();
    const TensorParallel& tp = engine.options().tp;
    if (tp.active()) whole = tp_assemble(engine.arena().params(), whole.data(), tp);
    std::vector<std::vector<float>> sparse;
    SparseParams* sp = engine.sparse_params();
    std::vector<std::string> sparse_names = sp ? sp->names() : std::vector<std::string>{};
    bool streamed = false;  // some tensor is too large to copy: rank 0 pulls it (RowServer)
    for (size_t i = 0; i < sparse_names.size(); ++i) {
        streamed = streamed || sp->streamed(i);
        sparse.push_back(sp->streamed(i) ? std::vector<float>{} : sp->gather(i, 0));
    }
    // Dynamic tables' rows with their ids, beside the weights (collective).
    if (sp && has_keyed_rows(*sp)) write_keyed_rows(*sp, keyed_rows_path(path), root);
    std::vector<NamedTensorF32> named =
        from_tier ? tier_params(engine) : named_params(engine, whole.data());
    std::vector<float> storage;  // every stage's tensors, on each rank of the pipeline group
    if (engine.options().pp) gather_stages(engine, named, whole, storage);
    std::optional<RowServer> server;
    if (streamed) server.emplace(*sp, engine.options().comm);
    if (!root) {
        if (server) server->serve();  // until rank 0 has written the file
        return;
    }
    for (size_t i = 0; i < sparse_names.size(); ++i) {
        if (sp->streamed(i))
            named.push_back({sparse_names[i], sp->shape(i), nullptr, server->reader(i)});
        else
            named.push_back({sparse_names[i], sp->shape(i), sparse[i].data()});
    }
    family.export_weights(path, named, "F32");
    if (server) server->stop();
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
    if (engine.options().pp)
        import_into_stage(family, path, named);
    else
        family.import_weights(path, named);
    if (split) tp_cut(params, whole.data(), w.arena.data());
    return w;
}

}  // namespace zt
