#include "offload/split_state.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace zt {

// Note [Partial offload]
// DeepSpeed's ZeRO-Offload++ (Twin-Flow) offloads a fraction `ratio` of the optimizer: on a GPU
// the rest is updated on the device, in parallel with the CPU's part, so that a model a little too
// large for the device trains nearly at the device's speed. Here the update range is cut at
// n - round(ratio n): the first part keeps its f32 master weights and optimizer state in the
// per-rank budget and is updated in place (MemoryState), the rest streams through the tier
// (TieredState) as with ratio 1. The optimizer's update is elementwise (optim/optimizer.h), so
// a range cut in two updates to the same bits as either whole: checkpoints, resumes and final
// weights read both parts through the same UpdateState calls, and a run with ratio 0.5 equals
// one in memory and one fully offloaded, bit for bit. The gradients stay on the device (Note
// [Gradients on the host] applies to ratio 1 only) and the offloaded part's are staged as before.

int64_t offloaded_numel(int64_t numel, double ratio) {
    if (ratio >= 1.0 || numel <= 0) return std::max<int64_t>(numel, 0);
    return std::clamp<int64_t>(std::llround(ratio * static_cast<double>(numel)), 1, numel);
}

SplitState::SplitState(Optimizer& optimizer, MemoryPool& pool, int64_t in_memory,
                       ComputeCopy compute, std::unique_ptr<TieredState> tier)
    : UpdateState(optimizer), n_mem_(in_memory), tier_(std::move(tier)) {
    ZT_ASSERT(n_mem_ >= 0 && tier_ != nullptr, "SplitState: no tier");
    ZT_ASSERT(compute.data != nullptr, "SplitState: the compute weights need their own buffer");
    master_ =
        Tensor::zeros(pool, {std::max<int64_t>(n_mem_, 1)}, DType::kF32, MemCategory::kParams);
    mem_ = std::make_unique<MemoryState>(optimizer, pool, master_.data<float>(), n_mem_, compute);
}

template <typename M, typename T>
void SplitState::split(int64_t lo, int64_t n, M mem, T tier) const {
    ZT_ASSERT(lo >= 0 && n >= 0 && lo + n <= numel(), "SplitState: range out of bounds");
    const int64_t a = std::min(lo, n_mem_), b = std::min(lo + n, n_mem_);
    if (b > a) mem(a, b - a, a - lo);
    const int64_t c = std::max(lo, n_mem_), e = lo + n;
    if (e > c) tier(c - n_mem_, e - c, c - lo);
}

void SplitState::read(int which, int64_t lo, int64_t n, float* out) {
    split(
        lo, n, [&](int64_t l, int64_t k, int64_t at) { mem_->read(which, l, k, out + at); },
        [&](int64_t l, int64_t k, int64_t at) { tier_->read(which, l, k, out + at); });
}

void SplitState::write(int which, int64_t lo, int64_t n, const float* in) {
    split(
        lo, n, [&](int64_t l, int64_t k, int64_t at) { mem_->write(which, l, k, in + at); },
        [&](int64_t l, int64_t k, int64_t at) { tier_->write(which, l, k, in + at); });
}

void SplitState::init(const Fill& fill) {
    mem_->init(fill);
    tier_->init([&](int64_t lo, int64_t n, float* out) { fill(n_mem_ + lo, n, out); });
}

void SplitState::step(const float* grads, std::span<const OptimSegment> segments, float lr,
                      int64_t step) {
    mem_->step(grads, slice_segments(segments, 0, n_mem_), lr, step);
    tier_->step(grads + n_mem_, slice_segments(segments, n_mem_, tier_->numel()), lr, step);
}

void SplitState::refresh_compute() {
    mem_->refresh_compute();
    tier_->refresh_compute();
}

UpdateStateStats SplitState::stats() const {
    UpdateStateStats s = tier_->stats();
    const UpdateStateStats m = mem_->stats();
    s.step_s += m.step_s;
    s.compute_s += m.compute_s;
    return s;
}

}  // namespace zt
