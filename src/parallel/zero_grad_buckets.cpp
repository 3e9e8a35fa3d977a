#include "parallel/zero_grad_buckets.h"

#include <algorithm>

// Note [Finish order]
// Collectives must be issued in the same order on every rank. Launches are (the backward's
// module order is the same everywhere), but finishing a reduction early, when its handle tests
// complete, depends on timing. That is harmless when finishing only copies results; a
// reduction whose finish issues a second collective (finish_communicates) is therefore finished
// at fixed points only: before the next launch, and at the end of the backward. It still
// overlaps with the backward computation until the next bucket is ready.

// Note [Priority]
// One communicator runs its transfers one at a time in issue order, so what is issued first goes
// first. In a stage 3 backward with overlap_comm, the post-backward hook of module k finds a
// gradient bucket full and would issue its reduction at once; the pre-backward hook of module
// k - 1 then issues the gathers of the next modules' weights (the prefetch), which would wait
// behind that reduction although the computation needs them first. With comm.priority the full
// buckets wait in deferred_ until the gathering has issued the next module's gathers (it calls
// ZeroContext::launch_deferred), and at the latest until the end of the backward. Launches happen
// at the same program points on every rank, so the order of the collectives stays the same on
// every rank; the bits do not change, only which transfer goes first.
// Issue order alone cannot help a gather issued while a reduction is already in flight, nor one
// behind several deferred buckets launched together. So with comm.priority the gathers (and hpZ's)
// are also urgent ops (Note [Urgent ops], comm/communicator.h; ModuleGather::issue_gather): the
// MPI backend starts them ahead of the reductions queued before them, and beside the one in
// flight at its next chunk boundary (comm.chunk_bytes, Note [Chunked ops]).
// Sparse parameters (sharded or dynamic embedding tables) exchange their gradient rows with an
// all-to-all in the middle of the backward, on the same communicator. Buckets that fill before it
// (a DLRM's top MLP and interaction) wait until it has been issued
// (ZeroContext::backward_exchange_done), so the rows, which the step's sparse update needs, do
// not queue behind dense gradients; buckets that fill after it launch at once, beside the rest
// of the backward (the bottom MLP).

namespace zt {

GradBuckets::GradBuckets(ZeroContext& ctx, Module& model, GradReduce& reduce)
    : ctx_(ctx), reduce_(reduce) {
    ready_count_.assign(ctx_.buckets.size(), 0);
    launched_.assign(ctx_.buckets.size(), 0);
    param_ready_.assign(ctx_.arena.params().size(), 0);
    if (ctx_.ranks == 1 && !reduce_.partitioned()) return;  // nothing is ever reduced
    if (ctx_.options.priority && ctx_.options.overlap_comm) {
        ctx_.launch_deferred = [this] {
            if (!exchange_pending_) launch_deferred();  // the rows still go first
        };
        ctx_.backward_exchange_done = [this] {
            exchange_pending_ = false;
            launch_deferred();
        };
    }
    for_each_module(model, [this](Module& m) {
        if (!m.own_parameters().empty())
            m.add_hook(HookPoint::kPostBackward, [this](Module& mm) { mark_ready(mm); });
    });
}

GradBuckets::~GradBuckets() {
    for (auto& p : pending_)
        if (p->handle) try {
                p->handle->wait();
            } catch (...) {
            }
}

void GradBuckets::begin_backward(bool boundary) {
    reducing_ = reduce_.partitioned() || (boundary && ctx_.ranks > 1);
    std::fill(ready_count_.begin(), ready_count_.end(), 0);
    std::fill(launched_.begin(), launched_.end(), 0);
    std::fill(param_ready_.begin(), param_ready_.end(), 0);
    deferred_.clear();
    exchange_pending_ = ctx_.backward_exchanges;
}

void GradBuckets::mark_ready(Module& m) {
    if (!reducing_) return;
    for (Parameter* p : m.own_parameters()) {
        const size_t i = static_cast<size_t>(ctx_.param_index.at(p));
        if (param_ready_[i]) continue;
        param_ready_[i] = 1;
        const int b = ctx_.bucket_of[i];
        if (++ready_count_[static_cast<size_t>(b)] <
            static_cast<int>(ctx_.buckets[static_cast<size_t>(b)].params.size()))
            continue;
        if (ctx_.options.overlap_comm) {
            if (ctx_.launch_deferred && (ctx_.backward_gathers || exchange_pending_))
                deferred_.push_back(b);  // after the next gathers or rows (Note [Priority])
            else
                launch(b);
        } else if (reduce_.partitioned()) {  // reduce now, waiting, so the bucket's memory returns
            launch(b);
            finish_all();
        }
    }
    // Retire finished reductions from the front, so lent bucket memory goes back early (not one
    // whose finish communicates: Note [Finish order]).
    while (!pending_.empty() && !pending_.front()->finish_communicates &&
           (!pending_.front()->handle || pending_.front()->handle->test())) {
        finish(*pending_.front());
        pending_.erase(pending_.begin());
    }
}

void GradBuckets::launch(int b) {
    // A pending reduction whose finish communicates finishes before this launch, on every rank.
    if (std::any_of(pending_.begin(), pending_.end(),
                    [](const auto& r) { return r->finish_communicates; }))
        finish_all();
    launched_[static_cast<size_t>(b)] = 1;
    const int64_t n = ctx_.buckets[static_cast<size_t>(b)].range.size();
    MemScope scope(ctx_.pool, MemPhase::kComm);
    auto r = std::make_unique<BucketReduction>();
    r->bucket = b;
    Tensor src = reduce_.bucket_grads(b);
    Tensor wire = src;
    if (ctx_.options.comm_dtype != src.dtype()) {
        r->send = Tensor::empty(ctx_.pool, {n}, ctx_.options.comm_dtype, MemCategory::kComm);
        r->send.copy_from(src);
        wire = r->send;
    }
    reduce_.issue(*r, wire);
    pending_.push_back(std::move(r));
}

void GradBuckets::finish(BucketReduction& r) {
    if (r.handle) ctx_.wait_exposed(r.handle);
    r.handle = nullptr;
    reduce_.finish(r);
}

void GradBuckets::finish_all() {
    for (auto& r : pending_) finish(*r);
    pending_.clear();
}

void GradBuckets::launch_deferred() {
    std::vector<int> ready;
    ready.swap(deferred_);
    for (int b : ready) launch(b);
}

void GradBuckets::end_backward() {
    if (!reducing_) return;
    launch_deferred();
    for (size_t b = 0; b < ctx_.buckets.size(); ++b)
        if (!launched_[b]) launch(static_cast<int>(b));
    finish_all();
    reducing_ = false;
}

}  // namespace zt
