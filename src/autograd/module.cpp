#include "autograd/module.h"

#include <algorithm>

namespace zt {

Shape Parameter::global_shape() const {
    Shape g = shape;
    if (split.sharded()) g[static_cast<size_t>(split.dim)] *= split.parts;
    return g;
}

int64_t split_global_index(const Shape& shape, const ParamSplit& split, int64_t local) {
    if (!split.sharded()) return local;
    // local = (outer, c, inner) with c the coordinate along dim; the split maps c alone.
    const auto d = static_cast<size_t>(split.dim);
    int64_t inner = 1;
    for (size_t k = d + 1; k < shape.size(); ++k) inner *= shape[k];
    const int64_t n = shape[d];
    const int64_t outer = local / (n * inner), c = local / inner % n, in = local % inner;
    const int64_t block_local = n / split.blocks;            // this part's rows per block
    const int64_t block_global = block_local * split.parts;  // the block's rows in the whole
    const int64_t g = c / block_local * block_global + split.part * block_local + c % block_local;
    return (outer * n * split.parts + g) * inner + in;
}

int64_t split_run_length(const Shape& shape, const ParamSplit& split) {
    if (!split.sharded()) return std::max<int64_t>(1, shape_numel(shape));
    const auto d = static_cast<size_t>(split.dim);
    int64_t inner = 1;
    for (size_t k = d + 1; k < shape.size(); ++k) inner *= shape[k];
    return std::max<int64_t>(1, shape[d] / split.blocks * inner);
}

int64_t split_local_index(const Shape& whole, const ParamSplit& split, int64_t global,
                          int64_t* part) {
    if (!split.sharded()) {
        *part = 0;
        return global;
    }
    const auto d = static_cast<size_t>(split.dim);
    int64_t inner = 1;
    for (size_t k = d + 1; k < whole.size(); ++k) inner *= whole[k];
    const int64_t n = whole[d];
    const int64_t outer = global / (n * inner), c = global / inner % n, in = global % inner;
    const int64_t block_global = n / split.blocks;
    const int64_t block_local = block_global / split.parts;
    const int64_t w = c % block_global;  // the row within its block
    *part = w / block_local;
    const int64_t cl = c / block_global * block_local + w % block_local;
    return (outer * (n / split.parts) + cl) * inner + in;
}

std::vector<Parameter*> Module::own_parameters() const {
    std::vector<Parameter*> out;
    for (const auto& p : params_) out.push_back(p.get());
    return out;
}

namespace {
std::string join(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }
}  // namespace

std::vector<Parameter*> Module::parameters() {
    std::vector<Parameter*> out;
    for (auto& p : params_) out.push_back(p.get());
    for (auto& c : children_) {
        auto sub = c->parameters();
        out.insert(out.end(), sub.begin(), sub.end());
    }
    return out;
}

void Module::add_hook(HookPoint point, Hook hook) {
    hooks_[static_cast<int>(point)].push_back(std::move(hook));
}

void Module::run_hooks(HookPoint point) {
    for (auto& h : hooks_[static_cast<int>(point)]) h(*this);
}

Parameter& Module::register_parameter(const std::string& local_name, Shape shape, ParamInit init,
                                      bool decay) {
    auto p = std::make_unique<Parameter>();
    p->name = join(name_, local_name);
    p->shape = std::move(shape);
    p->init = init;
    p->decay = decay;
    params_.push_back(std::move(p));
    param_local_names_.push_back(local_name);
    return *params_.back();
}

void Module::adopt(const std::string& local_name, std::unique_ptr<Module> child) {
    child->rename(join(name_, local_name));
    child_ptrs_.push_back(child.get());
    children_.push_back(std::move(child));
    child_local_names_.push_back(local_name);
}

void Module::rename(const std::string& name) {
    name_ = name;
    for (size_t i = 0; i < params_.size(); ++i)
        params_[i]->name = join(name_, param_local_names_[i]);
    for (size_t i = 0; i < children_.size(); ++i)
        children_[i]->rename(join(name_, child_local_names_[i]));
}

}  // namespace zt
