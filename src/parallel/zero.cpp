#include "parallel/zero.h"

#include <algorithm>
#include <unordered_map>

#include "tensor/kernels/elementwise.h"
#include "util/timer.h"

// Note [ZeRO data flow]
// Every rank scales its micro-losses by 1/(G N) (the engine), so the sum over ranks of the
// accumulated gradients is the gradient of the global mean loss. Reductions add in rank order
// (comm/communicator.h), and the gradient norm is a sum of per-partition sums in rank order, so
// stages that reduce at the same moments give the same bits.
// - Stage 0: whole gradients; at the accumulation boundary each bucket is all-reduced in place
//   (during the last micro-step's backward with overlap_comm, else after it); every rank updates
//   the whole arena.
// - Stage 1: whole gradients, reduced at the boundary as in stage 0 but reduce-scattered: each
//   rank receives the sum of its owned slice only, updates its owned range of the (partitioned)
//   master and optimizer state, and the compute weights are all-gathered in buckets of
//   allgather_bucket_size.
// - Stage 2: as stage 1, but gradients are partitioned too: backward writes into lent bucket
//   buffers (VarNode::bind_grad), each bucket is reduce-scattered at every micro-step as soon as
//   backward has finished it (with overlap_comm while backward goes on, else waiting for it) and
//   its owned slice is added to the owned gradient range; the bucket is then released.
// - Stage 3: as stage 2, and the compute weights are partitioned: a module's parameters are
//   all-gathered before its forward and its backward and released after them, except modules
//   under stage3_param_persistence_threshold elements, which stay gathered. The gather order of
//   the first training micro-step is recorded and later gathers prefetch the next modules in it,
//   up to stage3_prefetch_bucket_size elements ahead and stage3_max_live_parameters alive.
// Collectives are issued from hooks that run in the same order on every rank, so every rank
// issues the same collectives in the same order.

namespace zt {

struct ZeroDataParallel::Group {
    Range range;              // a module's own parameters: one contiguous arena range
    std::vector<int> params;  // indices into the arena's parameter list
    bool persistent = false;
    Tensor buffer;            // gathered compute weights of `range`, while live or in flight
    CommHandle handle;        // the gather, while in flight (null for one rank)
    bool unbound = false;     // gathered or in flight, parameters not yet pointing at buffer
    int refs = 0;             // modules inside whose forward or backward we are
};

struct ZeroDataParallel::Pending {
    int bucket = 0;
    CommHandle handle;  // null: nothing to wait for (one rank)
    Tensor send;        // the bucket converted to communication_data_type, when it differs
    Tensor recv;        // stages 1-3: this rank's reduced slice
};

namespace {

Tensor slice(const Tensor& t, int64_t lo, int64_t n) {
    ZT_ASSERT(lo >= 0 && lo + n <= t.numel());
    return Tensor::view_of(t.storage(), t.offset() + lo, {n}, t.dtype());
}

template <typename Fn>
void for_each_module(Module& m, Fn&& fn) {
    fn(m);
    for (Module* c : m.children()) for_each_module(*c, fn);
}

}  // namespace

CommType comm_type_of(DType t) {
    switch (t) {
        case DType::kF32: return CommType::kF32;
        case DType::kBF16: return CommType::kBF16;
        case DType::kF16: return CommType::kF16;
    }
    ZT_FAIL("unknown dtype");
}

ZeroDataParallel::ZeroDataParallel(MemoryPool& pool, Module& model, ParamArena& arena,
                                   Communicator* comm, ZeroOptions options)
    : pool_(pool), arena_(arena), comm_(comm), options_(options) {
    if (comm_) {
        ranks_ = comm_->size();
        rank_ = comm_->rank();
    }
    ZT_CHECK(options_.stage >= 0 && options_.stage <= 3,
             "zero_optimization.stage: expected 0, 1, 2 or 3, got ", options_.stage);
    const int64_t P = arena_.padded_numel();
    ZT_ASSERT(P % ranks_ == 0, "arena of ", P, " elements is not padded to ", ranks_, " ranks");
    owned_ = owned_range(P, ranks_, rank_);
    ZT_ASSERT(arena_.owned_lo() == owned_.lo && arena_.owned_hi() == owned_.hi,
              "the arena's owned range does not match rank ", rank_, " of ", ranks_);
    const ArenaOptions expect = zero_arena_options(options_.stage, arena_.options().compute_dtype,
                                                   arena_.options().grad_dtype, arena_.numel(),
                                                   ranks_, rank_);
    ZT_ASSERT(expect.full_master == arena_.options().full_master &&
                  expect.full_grads == arena_.options().full_grads &&
                  expect.full_compute == arena_.options().full_compute,
              "the arena's layout is not ZeRO stage ", options_.stage, "'s");

    const std::vector<Parameter*>& params = arena_.params();
    std::unordered_map<const Parameter*, int>& index = param_index_;
    for (size_t i = 0; i < params.size(); ++i) {
        index[params[i]] = static_cast<int>(i);
        param_ranges_.push_back({params[i]->offset, params[i]->offset + params[i]->numel()});
    }
    buckets_ = plan_buckets(param_ranges_, P, options_.reduce_bucket_size);
    bucket_of_.assign(params.size(), -1);
    for (size_t b = 0; b < buckets_.size(); ++b)
        for (int i : buckets_[b].params) bucket_of_[static_cast<size_t>(i)] = static_cast<int>(b);
    ready_count_.assign(buckets_.size(), 0);
    launched_.assign(buckets_.size(), 0);
    param_ready_.assign(params.size(), 0);
    bucket_grads_.resize(buckets_.size());
    if (options_.stage >= 2)
        for (size_t i = 0; i < params.size(); ++i) {
            const int b = bucket_of_[i];
            params[i]->var->bind_grad = [this, b](VarNode&) { bind_bucket(b); };
        }

    // Stage 3 gather units: each module's own parameters.
    std::unordered_map<const Module*, int> group_of_module;
    if (options_.stage == 3) {
        group_of_param_.assign(params.size(), -1);
        for_each_module(model, [&](Module& m) {
            std::vector<Parameter*> own = m.own_parameters();
            if (own.empty()) return;
            auto g = std::make_unique<Group>();
            g->range = {P, 0};
            for (Parameter* p : own) {
                const int i = index.at(p);
                g->params.push_back(i);
                g->range.lo = std::min(g->range.lo, p->offset);
                g->range.hi = std::max(g->range.hi, p->offset + p->numel());
                group_of_param_[static_cast<size_t>(i)] = static_cast<int>(groups_.size());
            }
            int64_t held = 0;
            for (Parameter* p : own) held += p->numel();
            ZT_ASSERT(held == g->range.size(), "module ", m.name(),
                      "'s parameters are not contiguous in the arena");
            g->persistent = g->range.size() < options_.persistence_threshold;
            group_of_module[&m] = static_cast<int>(groups_.size());
            groups_.push_back(std::move(g));
        });
    }
    for_each_module(model, [&](Module& m) {
        if (!m.own_parameters().empty() && (ranks_ > 1 || options_.stage >= 2))
            m.add_hook(HookPoint::kPostBackward, [this](Module& mm) { mark_ready(mm); });
        if (options_.stage != 3) return;
        std::vector<int> gs;
        if (auto it = group_of_module.find(&m); it != group_of_module.end()) gs.push_back(it->second);
        for (Parameter* p : m.used_parameters()) {
            const int g = group_of_param_[static_cast<size_t>(index.at(p))];
            if (std::find(gs.begin(), gs.end(), g) == gs.end()) gs.push_back(g);
        }
        if (gs.empty()) return;
        auto take = [this, gs](Module&) {
            for (int g : gs) acquire(g);
        };
        auto drop = [this, gs](Module&) {
            for (int g : gs) release(g);
        };
        m.add_hook(HookPoint::kPreForward, take);
        m.add_hook(HookPoint::kPostForward, drop);
        m.add_hook(HookPoint::kPreBackward, take);
        m.add_hook(HookPoint::kPostBackward, drop);
    });
    after_update();  // every rank's compute weights from the initial master weights
}

ZeroDataParallel::~ZeroDataParallel() {
    // Nothing may be left reading or writing buffers that are about to be freed.
    for (auto& p : pending_)
        if (p->handle) try {
                p->handle->wait();
            } catch (...) {
            }
    for (auto& g : groups_)
        if (g->handle) try {
                g->handle->wait();
            } catch (...) {
            }
}

Range ZeroDataParallel::update_range() const {
    return options_.stage == 0 ? Range{0, arena_.padded_numel()} : owned_;
}

std::vector<OptimSegment> ZeroDataParallel::update_segments() const {
    const Range u = update_range();
    std::vector<OptimSegment> out;
    const std::vector<Parameter*>& params = arena_.params();
    for (size_t i = 0; i < params.size(); ++i) {
        const Range r = intersect(param_ranges_[i], u);
        if (!r.empty()) out.push_back({r.lo - u.lo, r.size(), params[i]->decay});
    }
    return out;
}

Tensor ZeroDataParallel::update_master() {
    const Range u = update_range();
    if (arena_.options().full_master) return slice(arena_.master(), u.lo, u.size());
    return arena_.master();
}

Tensor ZeroDataParallel::update_grads() {
    const Range u = update_range();
    if (arena_.options().full_grads) return slice(arena_.grads(), u.lo, u.size());
    return arena_.grads();
}

void ZeroDataParallel::begin_backward(bool boundary) {
    reducing_ = options_.stage >= 2 || (boundary && ranks_ > 1);
    std::fill(ready_count_.begin(), ready_count_.end(), 0);
    std::fill(launched_.begin(), launched_.end(), 0);
    std::fill(param_ready_.begin(), param_ready_.end(), 0);
}

void ZeroDataParallel::mark_ready(Module& m) {
    if (!reducing_) return;
    for (Parameter* p : m.own_parameters()) {
        const size_t i = static_cast<size_t>(param_index_.at(p));
        if (param_ready_[i]) continue;
        param_ready_[i] = 1;
        const int b = bucket_of_[i];
        if (++ready_count_[static_cast<size_t>(b)] <
            static_cast<int>(buckets_[static_cast<size_t>(b)].params.size()))
            continue;
        if (options_.overlap_comm) {
            launch_bucket(b);
        } else if (options_.stage >= 2) {  // reduce now, waiting, so the bucket's memory returns
            launch_bucket(b);
            for (auto& p : pending_) finish_pending(*p);
            pending_.clear();
        }
    }
    // Retire finished reductions from the front, so lent bucket memory goes back early.
    while (!pending_.empty() && (!pending_.front()->handle || pending_.front()->handle->test())) {
        finish_pending(*pending_.front());
        pending_.erase(pending_.begin());
    }
}

void ZeroDataParallel::bind_bucket(int b) {
    Tensor& buf = bucket_grads_[static_cast<size_t>(b)];
    if (buf.defined()) return;
    const Bucket& bk = buckets_[static_cast<size_t>(b)];
    const DType gt = arena_.options().grad_dtype;
    MemScope scope(pool_, MemPhase::kComm);
    buf = Tensor::zeros(pool_, {bk.range.size()}, gt, MemCategory::kComm);
    for (int i : bk.params) {
        Parameter* p = arena_.params()[static_cast<size_t>(i)];
        p->grad = Tensor::view_of(buf.storage(), p->offset - bk.range.lo, p->shape, gt);
        p->var->grad = p->grad;
    }
}

void ZeroDataParallel::launch_bucket(int b) {
    launched_[static_cast<size_t>(b)] = 1;
    const Bucket& bk = buckets_[static_cast<size_t>(b)];
    const int64_t n = bk.range.size();
    MemScope scope(pool_, MemPhase::kComm);
    auto pend = std::make_unique<Pending>();
    pend->bucket = b;
    Tensor src;
    if (options_.stage >= 2) {
        bind_bucket(b);  // a bucket no parameter of which got a gradient reduces zeros
        src = bucket_grads_[static_cast<size_t>(b)];
    } else {
        src = slice(arena_.grads(), bk.range.lo, n);
    }
    Tensor wire = src;
    if (options_.comm_dtype != src.dtype()) {
        pend->send = Tensor::empty(pool_, {n}, options_.comm_dtype, MemCategory::kComm);
        pend->send.copy_from(src);
        wire = pend->send;
    }
    const CommType ct = comm_type_of(wire.dtype());
    if (options_.stage == 0) {
        if (ranks_ > 1) pend->handle = comm_->all_reduce(wire.raw(), n, ct);
    } else {
        std::vector<int64_t> counts = rank_counts(bk.range, arena_.padded_numel(), ranks_);
        pend->recv = Tensor::empty(pool_, {counts[static_cast<size_t>(rank_)]}, wire.dtype(),
                                   MemCategory::kComm);
        if (ranks_ > 1)
            pend->handle = comm_->reduce_scatter(wire.raw(), pend->recv.raw(), counts, ct);
        else
            pend->recv.copy_from(wire);
    }
    pending_.push_back(std::move(pend));
}

void ZeroDataParallel::finish_pending(Pending& p) {
    if (p.handle) wait_exposed(p.handle);
    p.handle = nullptr;
    const Bucket& bk = buckets_[static_cast<size_t>(p.bucket)];
    const DType gt = arena_.options().grad_dtype;
    if (options_.stage == 0) {
        if (p.send.defined()) slice(arena_.grads(), bk.range.lo, bk.range.size()).copy_from(p.send);
        return;
    }
    const Range mine = intersect(bk.range, owned_);
    if (!mine.empty()) {
        Tensor recv = p.recv;
        if (recv.dtype() != gt) {
            MemScope scope(pool_, MemPhase::kComm);
            recv = Tensor::empty(pool_, {mine.size()}, gt, MemCategory::kComm);
            recv.copy_from(p.recv);
        }
        if (options_.stage == 1) {
            slice(arena_.grads(), mine.lo, mine.size()).copy_from(recv);
        } else {
            Tensor dst = slice(arena_.grads(), mine.lo - owned_.lo, mine.size());
            kernels::add_inplace(dst, recv);
        }
    }
    if (options_.stage >= 2) {
        for (int i : bk.params) {
            Parameter* q = arena_.params()[static_cast<size_t>(i)];
            q->grad = Tensor();
            q->var->grad = Tensor();
        }
        bucket_grads_[static_cast<size_t>(p.bucket)] = Tensor();
    }
    p.send = Tensor();
    p.recv = Tensor();
}

void ZeroDataParallel::end_backward() {
    if (reducing_) {
        for (size_t b = 0; b < buckets_.size(); ++b)
            if (!launched_[b]) launch_bucket(static_cast<int>(b));
        for (auto& p : pending_) finish_pending(*p);
        pending_.clear();
        reducing_ = false;
    }
    if (options_.stage == 3) {
        tracing_ = false;
        cursor_ = 0;
        release_transient();
    }
}

void ZeroDataParallel::end_forward_only() {
    if (options_.stage == 3) {
        cursor_ = 0;
        release_transient();
    }
}

void ZeroDataParallel::wait_exposed(const CommHandle& h) {
    Stopwatch sw;
    h->wait();
    exposed_s_ += sw.elapsed_s();
}

double ZeroDataParallel::sum_over_ranks(double x) {
    if (ranks_ == 1) return x;
    std::vector<double> all(static_cast<size_t>(ranks_));
    wait_exposed(comm_->all_gather(&x, all.data(), std::vector<int64_t>(all.size(), 1),
                                   CommType::kF64));
    double s = 0;
    for (double v : all) s += v;
    return s;
}

double ZeroDataParallel::partitioned_sum(float* g, const std::function<double(float*, int64_t)>& part) {
    if (options_.stage == 0) {
        double s = 0;
        for (int r = 0; r < ranks_; ++r) {
            const Range pr = owned_range(arena_.padded_numel(), ranks_, r);
            s += part(g + pr.lo, pr.size());
        }
        return s;
    }
    return sum_over_ranks(part(g, owned_.size()));
}

void ZeroDataParallel::after_update() {
    arena_.sync_compute();
    if ((options_.stage == 1 || options_.stage == 2) && ranks_ > 1) {
        MemScope scope(pool_, MemPhase::kComm);
        Tensor& w = arena_.compute();  // whole; this rank's owned range is current
        const int64_t P = arena_.padded_numel();
        const int64_t step = std::max<int64_t>(1, options_.allgather_bucket_size);
        std::vector<CommHandle> hs;
        const size_t es = dtype_size(w.dtype());
        char* base = static_cast<char*>(w.raw());
        for (int64_t lo = 0; lo < P; lo += step) {
            const Range r{lo, std::min(P, lo + step)};
            const Range mine = intersect(r, owned_);
            hs.push_back(comm_->all_gather(base + mine.lo * es, base + r.lo * es,
                                           rank_counts(r, P, ranks_), comm_type_of(w.dtype())));
        }
        for (auto& h : hs) wait_exposed(h);
    }
    if (options_.stage == 3)
        for (size_t g = 0; g < groups_.size(); ++g)
            if (groups_[g]->persistent) {
                start_gather(static_cast<int>(g));
                finish_gather(static_cast<int>(g));
            }
}

std::vector<float> ZeroDataParallel::gather_master() {
    const int64_t P = arena_.padded_numel();
    std::vector<float> out(static_cast<size_t>(P));
    if (arena_.options().full_master) return arena_.master().to_vector();
    const float* mine = arena_.master().data<float>();
    if (ranks_ == 1) {
        std::copy(mine, mine + P, out.begin());
        return out;
    }
    wait_exposed(comm_->all_gather(mine, out.data(), rank_counts({0, P}, P, ranks_),
                                   CommType::kF32));
    return out;
}

void ZeroDataParallel::load_master(const float* whole) {
    float* m = arena_.master().data<float>();
    if (arena_.options().full_master)
        std::copy(whole, whole + arena_.padded_numel(), m);
    else
        std::copy(whole + owned_.lo, whole + owned_.hi, m);
    after_update();
}

// ---- stage 3: gathering parameters around modules ----

void ZeroDataParallel::start_gather(int g) {
    Group& G = *groups_[static_cast<size_t>(g)];
    const DType ct = arena_.options().compute_dtype;
    MemScope scope(pool_, MemPhase::kComm);
    if (!G.buffer.defined()) {
        G.buffer = Tensor::empty(pool_, {G.range.size()}, ct, MemCategory::kComm);
        live_elems_ += G.range.size();
    }
    G.unbound = true;
    const Range mine = intersect(G.range, owned_);
    const size_t es = dtype_size(ct);
    const char* src = static_cast<const char*>(arena_.compute().raw()) + (mine.lo - owned_.lo) * es;
    if (ranks_ > 1)
        G.handle = comm_->all_gather(src, G.buffer.raw(),
                                     rank_counts(G.range, arena_.padded_numel(), ranks_),
                                     comm_type_of(ct));
    else
        std::copy(src, src + mine.size() * static_cast<int64_t>(es),
                  static_cast<char*>(G.buffer.raw()));
}

void ZeroDataParallel::finish_gather(int g) {
    Group& G = *groups_[static_cast<size_t>(g)];
    if (G.handle) wait_exposed(G.handle);
    G.handle = nullptr;
    G.unbound = false;
    const DType ct = arena_.options().compute_dtype;
    for (int i : G.params) {
        Parameter* p = arena_.params()[static_cast<size_t>(i)];
        p->var->value = Tensor::view_of(G.buffer.storage(), p->offset - G.range.lo, p->shape, ct);
    }
}

void ZeroDataParallel::acquire(int g) {
    Group& G = *groups_[static_cast<size_t>(g)];
    if (tracing_) trace_.push_back(g);
    if (!G.buffer.defined()) start_gather(g);
    if (G.unbound) finish_gather(g);
    ++G.refs;
    if (!tracing_) prefetch_after(g);
}

void ZeroDataParallel::release(int g) {
    Group& G = *groups_[static_cast<size_t>(g)];
    ZT_ASSERT(G.refs > 0, "ZeRO-3: release without acquire");
    if (--G.refs > 0 || G.persistent) return;
    for (int i : G.params) arena_.params()[static_cast<size_t>(i)]->var->value = Tensor();
    G.buffer = Tensor();
    live_elems_ -= G.range.size();
}

void ZeroDataParallel::prefetch_after(int g) {
    if (trace_.empty() || options_.prefetch_bucket_size <= 0) return;
    auto it = std::find(trace_.begin() + static_cast<std::ptrdiff_t>(std::min(cursor_, trace_.size())),
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
        if (ahead > options_.prefetch_bucket_size) break;
        if (H.buffer.defined()) continue;  // live or already in flight
        if (live_elems_ + H.range.size() > options_.max_live_parameters) break;
        start_gather(trace_[k]);
    }
}

void ZeroDataParallel::release_transient() {
    for (auto& G : groups_) {
        if (G->persistent || G->refs > 0 || !G->buffer.defined()) continue;
        if (G->handle) wait_exposed(G->handle);
        G->handle = nullptr;
        G->unbound = false;
        for (int i : G->params) arena_.params()[static_cast<size_t>(i)]->var->value = Tensor();
        G->buffer = Tensor();
        live_elems_ -= G->range.size();
    }
}

}  // namespace zt
