#include "parallel/zero_module_gather.h"

#include <algorithm>
#include <unordered_map>

#include "comm/compressed.h"

namespace zt {

struct ModuleGather::Group {
    Range range;              // a module's own parameters: one contiguous arena range
    std::vector<int> params;  // indices into the arena's parameter list
    bool persistent = false;
    Tensor buffer;      // gathered compute weights of `range`, while live or in flight
    CommHandle handle;  // the gather, while in flight (null for one rank)
    std::unique_ptr<ParamTier::Fetch> fetch;  // offload_param: the owned slice being read
    bool unbound = false;  // gathered or in flight, parameters not yet pointing at buffer
    int refs = 0;          // modules inside whose forward or backward we are
    std::unique_ptr<CompressedExchange> exchange;  // quantized weights: the bytes in flight
    Tensor secondary;              // hpZ: this rank's slice of the last gathered weights
    bool secondary_valid = false;  // they are the current weights
    bool from_secondary = false;   // the gather in flight is the hpZ group's
};

ModuleGather::ModuleGather(ZeroContext& ctx, Module& model) : ctx_(ctx) {
    ctx_.backward_gathers = true;
    if (ctx_.options.quantized_weights && ctx_.ranks > 1)
        weight_codec_ = make_codec(ctx_.options.weight_codec);
    const int64_t P = ctx_.padded();
    std::unordered_map<const Module*, int> group_of_module;
    group_of_param_.assign(ctx_.arena.params().size(), -1);
    for_each_module(model, [&](Module& m) {
        std::vector<Parameter*> own = m.own_parameters();
        if (own.empty()) return;
        auto g = std::make_unique<Group>();
        g->range = {P, 0};
        for (Parameter* p : own) {
            const int i = ctx_.param_index.at(p);
            g->params.push_back(i);
            g->range.lo = std::min(g->range.lo, p->offset);
            g->range.hi = std::max(g->range.hi, p->offset + p->numel());
            group_of_param_[static_cast<size_t>(i)] = static_cast<int>(groups_.size());
        }
        int64_t held = 0;
        for (Parameter* p : own) held += p->numel();
        ZT_ASSERT(held == g->range.size(), "module ", m.name(),
                  "'s parameters are not contiguous in the arena");
        g->persistent = g->range.size() < ctx_.options.persistence_threshold;
        group_of_module[&m] = static_cast<int>(groups_.size());
        groups_.push_back(std::move(g));
    });
    for_each_module(model, [&](Module& m) {
        std::vector<int> gs;
        if (auto it = group_of_module.find(&m); it != group_of_module.end())
            gs.push_back(it->second);
        for (Parameter* p : m.used_parameters()) {
            const int g = group_of_param_[static_cast<size_t>(ctx_.param_index.at(p))];
            if (std::find(gs.begin(), gs.end(), g) == gs.end()) gs.push_back(g);
        }
        if (gs.empty()) return;
        auto take = [this, gs](Module&) {
            for (int g : gs) acquire(g, false);
        };
        auto take_backward = [this, gs](Module&) {
            for (int g : gs) acquire(g, true);
        };
        auto drop = [this, gs](Module&) {
            for (int g : gs) release(g);
        };
        m.add_hook(HookPoint::kPreForward, take);
        m.add_hook(HookPoint::kPostForward, drop);
        m.add_hook(HookPoint::kPreBackward, take_backward);
        m.add_hook(HookPoint::kPostBackward, drop);
    });
}

ModuleGather::~ModuleGather() {
    for (auto& g : groups_) {
        if (g->handle) try {
                g->handle->wait();
            } catch (...) {
            }
        if (g->fetch) try {
                ctx_.param_tier->wait(*g->fetch);
            } catch (...) {
            }
    }
}

void ModuleGather::after_update() {
    for (auto& G : groups_) G->secondary_valid = false;  // the weights changed
    for (size_t g = 0; g < groups_.size(); ++g)
        if (groups_[g]->persistent) {
            start_gather(static_cast<int>(g));
            finish_gather(static_cast<int>(g));
        }
}

void ModuleGather::end_backward() {
    tracing_ = false;
    cursor_ = 0;
    release_transient();
}

void ModuleGather::end_forward_only() {
    cursor_ = 0;
    release_transient();
}

void ModuleGather::start_gather(int g) {
    Group& G = *groups_[static_cast<size_t>(g)];
    const DType ct = ctx_.arena.options().compute_dtype;
    MemScope scope(ctx_.pool, MemPhase::kComm);
    if (!G.buffer.defined()) {
        G.buffer = Tensor::empty(ctx_.pool, {G.range.size()}, ct, MemCategory::kComm);
        live_elems_ += G.range.size();
    }
    G.unbound = true;
    G.from_secondary = backward_ && G.secondary_valid;
    if (G.from_secondary) {  // hpZ: the forward's weights, from the group's slices
        UrgentScope urgent(ctx_.options.hpz_group, ctx_.options.priority);  // Note [Priority]
        G.handle = ctx_.options.hpz_group->all_gather(G.secondary.raw(), G.buffer.raw(),
                                                      secondary_counts(G), comm_type_of(ct));
        return;
    }
    const Range mine = intersect(G.range, ctx_.owned);
    if (ctx_.param_tier) {  // read the owned slice now; gather it once read (finish_gather)
        G.fetch = mine.empty() ? ctx_.param_tier->fetch(0, 0)  // nothing of it owned here
                               : ctx_.param_tier->fetch(mine.lo - ctx_.owned.lo, mine.size());
        return;
    }
    issue_gather(G, static_cast<const char*>(ctx_.arena.compute().raw()) +
                        (mine.lo - ctx_.owned.lo) * static_cast<int64_t>(dtype_size(ct)));
}

void ModuleGather::issue_gather(Group& G, const char* src) {
    const DType ct = ctx_.arena.options().compute_dtype;
    const Range mine = intersect(G.range, ctx_.owned);
    const size_t es = dtype_size(ct);
    // The computation waits for these weights: ahead of the gradient buckets in flight (Note
    // [Priority] in zero_grad_buckets.cpp).
    UrgentScope urgent(ctx_.comm, ctx_.options.priority);
    if (weight_codec_) {  // the owned slice in f32, encoded; decoded in finish_gather
        Tensor mine_f32;
        const float* x = reinterpret_cast<const float*>(src);
        if (ct != DType::kF32) {
            mine_f32 = Tensor::empty(ctx_.pool, {mine.size()}, DType::kF32, MemCategory::kComm);
            convert(src, ct, mine_f32.raw(), DType::kF32, static_cast<size_t>(mine.size()));
            x = mine_f32.data<float>();
        }
        G.exchange = std::make_unique<CompressedExchange>(
            ctx_.pool, *ctx_.comm, *weight_codec_, rank_counts(G.range, ctx_.padded(), ctx_.ranks),
            comm_type_of(ct));
        G.handle = G.exchange->start_all_gather(x, nullptr);
        weight_stats_.add(G.exchange->stats());  // a fresh exchange: this gather's alone
    } else if (ctx_.ranks > 1)
        G.handle = ctx_.comm->all_gather(
            src, G.buffer.raw(), rank_counts(G.range, ctx_.padded(), ctx_.ranks), comm_type_of(ct));
    else
        std::copy(src, src + mine.size() * static_cast<int64_t>(es),
                  static_cast<char*>(G.buffer.raw()));
}

void ModuleGather::finish_gather(int g) {
    Group& G = *groups_[static_cast<size_t>(g)];
    if (G.fetch) {  // offload_param: the read first, then the gather from it
        ctx_.param_tier->wait(*G.fetch);
        MemScope scope(ctx_.pool, MemPhase::kComm);
        issue_gather(G, static_cast<const char*>(G.fetch->data()));
        if (G.handle) ctx_.wait_exposed(G.handle);
        G.handle = nullptr;
        G.fetch.reset();
    }
    if (G.handle) ctx_.wait_exposed(G.handle);
    G.handle = nullptr;
    G.unbound = false;
    const DType ct = ctx_.arena.options().compute_dtype;
    if (G.exchange) {
        MemScope scope(ctx_.pool, MemPhase::kComm);
        if (ct == DType::kF32) {
            G.exchange->finish_all_gather(G.buffer.data<float>());
        } else {
            Tensor all =
                Tensor::empty(ctx_.pool, {G.range.size()}, DType::kF32, MemCategory::kComm);
            G.exchange->finish_all_gather(all.data<float>());
            G.buffer.copy_from(all);
        }
        G.exchange.reset();
    }
    if (!G.from_secondary) keep_secondary(g);
    G.from_secondary = false;
    for (int i : G.params) {
        Parameter& p = ctx_.param(i);
        p.var->value = Tensor::view_of(G.buffer.storage(), p.offset - G.range.lo, p.shape, ct);
    }
}

std::vector<int64_t> ModuleGather::secondary_counts(const Group& G) const {
    const int L = ctx_.options.hpz_group->size();
    std::vector<int64_t> c(static_cast<size_t>(L));
    const int64_t n = G.range.size();
    for (int l = 0; l < L; ++l) c[static_cast<size_t>(l)] = n * (l + 1) / L - n * l / L;
    return c;
}

void ModuleGather::keep_secondary(int g) {
    Group& G = *groups_[static_cast<size_t>(g)];
    if (!ctx_.options.hpz_group || G.persistent) return;
    const int l = ctx_.options.hpz_group->rank(), L = ctx_.options.hpz_group->size();
    const int64_t n = G.range.size(), lo = n * l / L, hi = n * (l + 1) / L;
    const DType ct = ctx_.arena.options().compute_dtype;
    if (!G.secondary.defined())  // kept between steps: counted as parameters
        G.secondary =
            Tensor::empty(ctx_.pool, {std::max<int64_t>(hi - lo, 1)}, ct, MemCategory::kParams);
    const size_t es = dtype_size(ct);
    std::copy(static_cast<const char*>(G.buffer.raw()) + lo * static_cast<int64_t>(es),
              static_cast<const char*>(G.buffer.raw()) + hi * static_cast<int64_t>(es),
              static_cast<char*>(G.secondary.raw()));
    G.secondary_valid = true;
}

void ModuleGather::acquire(int g, bool backward) {
    backward_ = backward;
    Group& G = *groups_[static_cast<size_t>(g)];
    if (tracing_) trace_.push_back(g);
    if (!G.buffer.defined()) start_gather(g);
    if (G.unbound) finish_gather(g);
    ++G.refs;
    if (!tracing_) prefetch_after(g);
    // The gathers the computation needs first are issued: now the gradient buckets that waited
    // for them (Note [Priority] in zero_grad_buckets.cpp).
    if (backward && ctx_.launch_deferred) ctx_.launch_deferred();
}

void ModuleGather::release(int g) {
    Group& G = *groups_[static_cast<size_t>(g)];
    ZT_ASSERT(G.refs > 0, "ZeRO-3: release without acquire");
    if (--G.refs > 0 || G.persistent) return;
    for (int i : G.params) ctx_.param(i).var->value = Tensor();
    G.buffer = Tensor();
    live_elems_ -= G.range.size();
}

void ModuleGather::prefetch_after(int g) {
    if (trace_.empty() || ctx_.options.prefetch_bucket_size <= 0) return;
    auto it =
        std::find(trace_.begin() + static_cast<std::ptrdiff_t>(std::min(cursor_, trace_.size())),
                  trace_.end(), g);
    if (it == trace_.end()) it = std::find(trace_.begin(), trace_.end(), g);
    if (it == trace_.end()) return;
    size_t pos = static_cast<size_t>(it - trace_.begin());
    cursor_ = pos + 1;
    int64_t ahead = 0;
    for (size_t k = pos + 1; k < trace_.size(); ++k) {
        Group& H = *groups_[static_cast<size_t>(trace_[k])];
        if (H.persistent || trace_[k] == g) continue;
        ahead += H.range.size();
        if (ahead > ctx_.options.prefetch_bucket_size) break;
        if (H.buffer.defined()) continue;  // live or already in flight
        if (live_elems_ + H.range.size() > ctx_.options.max_live_parameters) break;
        start_gather(trace_[k]);
    }
}

void ModuleGather::release_transient() {
    for (auto& G : groups_) {
        if (G->persistent || G->refs > 0 || !G->buffer.defined()) continue;
        if (G->handle) ctx_.wait_exposed(G->handle);
        G->handle = nullptr;
        G->exchange.reset();
        G->from_secondary = false;
        if (G->fetch) ctx_.param_tier->wait(*G->fetch);
        G->fetch.reset();
        G->unbound = false;
        for (int i : G->params) ctx_.param(i).var->value = Tensor();
        G->buffer = Tensor();
        live_elems_ -= G->range.size();
    }
}

}  // namespace zt
