#include "offload/memory_state.h"

#include <algorithm>

#include "util/timer.h"

namespace zt {

std::vector<std::string> UpdateState::names() const {
    std::vector<std::string> out{"master"};
    for (std::string& s : optimizer_.state_names()) out.push_back(std::move(s));
    return out;
}

std::vector<OptimSegment> slice_segments(std::span<const OptimSegment> segs, int64_t lo,
                                         int64_t n) {
    std::vector<OptimSegment> out;
    for (const OptimSegment& s : segs) {
        const int64_t b = std::max(s.offset, lo), e = std::min(s.offset + s.numel, lo + n);
        if (b < e) out.push_back({b - lo, e - b, s.decay});
    }
    return out;
}

MemoryState::MemoryState(Optimizer& optimizer, MemoryPool& pool, float* master, int64_t numel,
                         ComputeCopy compute)
    : UpdateState(optimizer), opt_(optimizer), master_(master), numel_(numel), compute_(compute) {
    opt_.init_state(pool, numel);
}

float* MemoryState::data(int which) {
    if (which == 0) return master_;
    auto st = opt_.state();
    ZT_ASSERT(which >= 1 && which <= static_cast<int>(st.size()), "no state tensor ", which);
    return st[static_cast<size_t>(which - 1)].second.data<float>();
}

void MemoryState::read(int which, int64_t lo, int64_t n, float* out) {
    ZT_ASSERT(lo >= 0 && n >= 0 && lo + n <= numel_);
    const float* d = data(which);
    std::copy(d + lo, d + lo + n, out);
}

void MemoryState::write(int which, int64_t lo, int64_t n, const float* in) {
    ZT_ASSERT(lo >= 0 && n >= 0 && lo + n <= numel_);
    std::copy(in, in + n, data(which) + lo);
}

void MemoryState::init(const Fill& fill) {
    fill(0, numel_, master_);
    for (auto& [name, t] : opt_.state()) t.zero();
    refresh_compute();
}

void MemoryState::step(const float* grads, std::span<const OptimSegment> segments, float lr,
                       int64_t step) {
    Stopwatch sw;
    opt_.step(master_, grads, segments, lr, step, compute_);
    stats_.step_s += sw.elapsed_s();
    stats_.compute_s = stats_.step_s;
}

void MemoryState::refresh_compute() {
    if (compute_.data == nullptr) return;
    convert(master_, DType::kF32, compute_.data, compute_.dtype, static_cast<size_t>(numel_));
}

}  // namespace zt
