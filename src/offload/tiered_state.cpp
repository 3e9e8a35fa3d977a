#include "offload/tiered_state.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"
#include "util/timer.h"

// Note [Sub-group records]
// The update range is cut into sub-groups of `group` elements (sub_group_size rounded up to a
// multiple of kStoreAlign / 4, the last one shorter). Sub-group k's master weights and each state
// buffer lie together in one record of (1 + states) x group f32 at offset k x record bytes: one
// read and one write per sub-group per step, each a large aligned transfer, which is what a disk
// does fastest. The tail of the last record beyond the range is written as zeros and never read.
//
// Note [Streaming step]
// With B staging buffers, the step keeps B - 1 reads ahead: before updating sub-group k it issues
// the read of k + B - 1 into the buffer that k - 1 used (after that buffer's write finished), then
// waits for k's read, copies k's gradients in (the device-to-host copy of a GPU run), runs the
// optimizer's step_on over the record, which also writes the compute copy into the staging
// buffer, copies that out (host to device) and issues k's write. So the disk reads ahead and
// writes behind while the CPU updates; io_wait_s is the time the update waited for it anyway.
// Where the store is mapped memory (the cpu tier) records are updated in place and only the
// gradients and compute copy go through the staging buffers.

namespace zt {

namespace {

constexpr int64_t kGroupAlign = static_cast<int64_t>(kStoreAlign / sizeof(float));

int64_t group_elems(int64_t numel, const TieredStateOptions& o) {
    ZT_CHECK(o.sub_group_size >= 1, "zero_optimization.sub_group_size: expected >= 1, got ",
             o.sub_group_size);
    const int64_t g = std::min<int64_t>(o.sub_group_size, std::max<int64_t>(numel, 1));
    return (g + kGroupAlign - 1) / kGroupAlign * kGroupAlign;
}

int64_t group_count(int64_t numel, int64_t group) { return (numel + group - 1) / group; }

uint64_t round_up(uint64_t n) { return (n + kStoreAlign - 1) / kStoreAlign * kStoreAlign; }

}  // namespace

uint64_t TieredState::store_bytes(const Optimizer& optimizer, int64_t numel,
                                  const TieredStateOptions& options) {
    const int64_t g = group_elems(numel, options);
    const uint64_t tensors = 1 + optimizer.state_names().size();
    return static_cast<uint64_t>(group_count(numel, g)) * tensors * static_cast<uint64_t>(g) *
           sizeof(float);
}

uint64_t TieredState::staging_bytes(int states, int64_t numel, DType compute,
                                    const TieredStateOptions& options, bool mapped) {
    const auto g = static_cast<uint64_t>(group_elems(numel, options));
    const uint64_t tensors = 1 + static_cast<uint64_t>(states);
    const uint64_t per = (mapped ? 0 : round_up(tensors * g * sizeof(float))) +
                         (options.grads_on_host ? 0 : round_up(g * sizeof(float))) +
                         round_up(g * dtype_size(compute));
    return per * static_cast<uint64_t>(std::max(1, options.buffer_count));
}

uint64_t TieredState::staging_bytes(const Optimizer& optimizer, int64_t numel, DType compute,
                                    const TieredStateOptions& options) {
    return staging_bytes(static_cast<int>(optimizer.state_names().size()), numel, compute, options,
                         false);
}

TieredState::TieredState(const Optimizer& optimizer, int64_t numel, ComputeCopy compute,
                         std::unique_ptr<Store> store, TieredStateOptions options,
                         ParamTier* params)
    : UpdateState(optimizer),
      numel_(numel),
      tensors_(1 + static_cast<int>(optimizer.state_names().size())),
      group_(group_elems(numel, options)),
      groups_(group_count(numel, group_)),
      record_bytes_(static_cast<uint64_t>(tensors_) * static_cast<uint64_t>(group_) *
                    sizeof(float)),
      compute_(compute),
      store_(std::move(store)),
      params_(params),
      mapped_(store_->mapped(0) != nullptr),
      grads_on_host_(options.grads_on_host) {
    ZT_CHECK(options.buffer_count >= 1,
             "zero_optimization.offload_optimizer.buffer_count: expected >= 1, got ",
             options.buffer_count);
    ZT_ASSERT(compute_.data != nullptr || params_ != nullptr,
              "TieredState: the compute weights need their own buffer or a parameter tier");
    ZT_ASSERT(
        params_ == nullptr || (params_->numel() == numel && params_->dtype() == compute.dtype),
        "TieredState: the parameter tier does not hold this range's compute weights");
    ZT_ASSERT(store_->capacity() >= store_bytes(optimizer, numel, options),
              "TieredState: store of ", store_->capacity(), " bytes, ",
              store_bytes(optimizer, numel, options), " needed");
    const auto g = static_cast<size_t>(group_);
    staging_.resize(static_cast<size_t>(options.buffer_count));
    for (Staging& s : staging_) {
        auto take = [&](size_t bytes) {
            void* p = alloc_host_buffer(bytes);
            allocations_.push_back(p);
            stats_.staging_bytes += static_cast<int64_t>(round_up(bytes));
            return p;
        };
        if (!mapped_) s.record = static_cast<float*>(take(record_bytes_));
        if (!grads_on_host_) s.grads = static_cast<float*>(take(g * sizeof(float)));
        s.copy = take(g * dtype_size(compute_.dtype));
    }
    stats_.tier_bytes = static_cast<int64_t>(store_->capacity());
}

TieredState::~TieredState() {
    for (Staging& s : staging_)
        if (s.pending) {
            try {
                store_->wait(s.pending);
            } catch (...) {  // a destructor reports nothing; the file goes anyway
            }
        }
    for (void* p : allocations_) free_host_buffer(p);
}

void TieredState::wait(Store::Ticket t) {
    Stopwatch sw;
    store_->wait(t);
    stats_.io_wait_s += sw.elapsed_s();
}

float* TieredState::load(int64_t k, Staging& s) {
    if (mapped_) return static_cast<float*>(store_->mapped(record_offset(k)));
    if (s.pending) wait(std::exchange(s.pending, 0));
    wait(store_->read(record_offset(k), s.record, record_bytes_));
    return s.record;
}

void TieredState::store_back(int64_t k, Staging& s) {
    if (mapped_) return;
    wait(store_->write(record_offset(k), s.record, record_bytes_));
}

void TieredState::copy_out(int64_t k, const Staging& s) {
    const size_t es = dtype_size(compute_.dtype);
    const auto n = static_cast<size_t>(group_n(k));
    if (params_) {  // offload_param: the compute weights live on their own tier
        params_->write(group_lo(k), group_n(k), s.copy);
        return;
    }
    std::memcpy(static_cast<char*>(compute_.data) + static_cast<size_t>(group_lo(k)) * es, s.copy,
                n * es);
    stats_.h2d_bytes += n * es;
}

void TieredState::read(int which, int64_t lo, int64_t n, float* out) {
    ZT_ASSERT(which >= 0 && which < tensors_ && lo >= 0 && n >= 0 && lo + n <= numel_);
    for (int64_t k = lo / group_; n > 0 && k < groups_; ++k) {
        const int64_t b = std::max(lo, group_lo(k)), e = std::min(lo + n, group_lo(k) + group_n(k));
        if (b >= e) continue;
        const float* rec = load(k, staging_[0]);
        std::copy_n(rec + which * group_ + (b - group_lo(k)), e - b, out + (b - lo));
    }
}

void TieredState::write(int which, int64_t lo, int64_t n, const float* in) {
    ZT_ASSERT(which >= 0 && which < tensors_ && lo >= 0 && n >= 0 && lo + n <= numel_);
    for (int64_t k = lo / group_; n > 0 && k < groups_; ++k) {
        const int64_t b = std::max(lo, group_lo(k)), e = std::min(lo + n, group_lo(k) + group_n(k));
        if (b >= e) continue;
        float* rec = load(k, staging_[0]);
        std::copy_n(in + (b - lo), e - b, rec + which * group_ + (b - group_lo(k)));
        store_back(k, staging_[0]);
    }
}

void TieredState::init(const Fill& fill) {
    Staging& s = staging_[0];
    for (int64_t k = 0; k < groups_; ++k) {
        float* rec = mapped_ ? static_cast<float*>(store_->mapped(record_offset(k))) : s.record;
        std::memset(rec, 0, record_bytes_);
        fill(group_lo(k), group_n(k), rec);
        convert(rec, DType::kF32, s.copy, compute_.dtype, static_cast<size_t>(group_n(k)));
        copy_out(k, s);
        store_back(k, s);
    }
}

void TieredState::refresh_compute() {
    Staging& s = staging_[0];
    for (int64_t k = 0; k < groups_; ++k) {
        const float* rec = load(k, s);
        convert(rec, DType::kF32, s.copy, compute_.dtype, static_cast<size_t>(group_n(k)));
        copy_out(k, s);
    }
}

void TieredState::step(const float* grads, std::span<const OptimSegment> segments, float lr,
                       int64_t step) {
    Stopwatch total;
    const int64_t B = static_cast<int64_t>(staging_.size());
    std::vector<Store::Ticket> reads(staging_.size(), 0);
    auto issue_read = [&](int64_t k) {
        Staging& s = staging_[static_cast<size_t>(k % B)];
        if (s.pending) wait(std::exchange(s.pending, 0));
        Stopwatch sw;  // issuing blocks too while the store's queue is full
        reads[static_cast<size_t>(k % B)] = store_->read(record_offset(k), s.record, record_bytes_);
        stats_.io_wait_s += sw.elapsed_s();
    };
    if (!mapped_)
        for (int64_t k = 0; k < std::min(B - 1, groups_); ++k) issue_read(k);
    std::vector<float*> state(static_cast<size_t>(tensors_ - 1));
    for (int64_t k = 0; k < groups_; ++k) {
        Staging& s = staging_[static_cast<size_t>(k % B)];
        float* rec;
        if (mapped_) {
            rec = static_cast<float*>(store_->mapped(record_offset(k)));
        } else {
            if (k + B - 1 < groups_) issue_read(k + B - 1);
            wait(std::exchange(reads[static_cast<size_t>(k % B)], 0));
            rec = s.record;
        }
        const int64_t lo = group_lo(k), n = group_n(k);
        // On the host already, the gradients crossed as their buckets' reductions landed: the
        // same bytes, counted here.
        const float* g = grads + lo;
        if (!grads_on_host_) {
            std::memcpy(s.grads, g, static_cast<size_t>(n) * sizeof(float));
            g = s.grads;
        }
        stats_.d2h_bytes += static_cast<uint64_t>(n) * sizeof(float);
        for (int i = 1; i < tensors_; ++i) state[static_cast<size_t>(i - 1)] = rec + i * group_;
        const std::vector<OptimSegment> segs = slice_segments(segments, lo, n);
        int64_t covered = 0;
        for (const OptimSegment& sg : segs) covered += sg.numel;
        if (covered < n)  // padding: step_on leaves it alone, the compute copy keeps it zero
            std::memset(s.copy, 0, static_cast<size_t>(n) * dtype_size(compute_.dtype));
        Stopwatch sw;
        optimizer_.step_on(rec, g, state.data(), n, segs, lr, step,
                           ComputeCopy{s.copy, compute_.dtype});
        stats_.compute_s += sw.elapsed_s();
        copy_out(k, s);
        if (!mapped_) {
            Stopwatch sw;
            s.pending = store_->write(record_offset(k), s.record, record_bytes_);
            stats_.io_wait_s += sw.elapsed_s();
        }
    }
    for (Staging& s : staging_)
        if (s.pending) wait(std::exchange(s.pending, 0));
    stats_.step_s += total.elapsed_s();
}

UpdateStateStats TieredState::stats() const {
    UpdateStateStats st = stats_;
    const StoreStats ss = store_->stats();
    st.bytes_read = ss.bytes_read;
    st.bytes_written = ss.bytes_written;
    return st;
}

}  // namespace zt
