#include "offload/param_tier.h"

#include <cstring>

#include "util/error.h"
#include "util/timer.h"

namespace zt {

namespace {

uint64_t align_down(uint64_t b) { return b / kStoreAlign * kStoreAlign; }
uint64_t align_up(uint64_t b) { return (b + kStoreAlign - 1) / kStoreAlign * kStoreAlign; }

}  // namespace

ParamTier::Fetch::~Fetch() {
    // The store wrote into buffer_ until the ticket's wait; a Fetch dropped unwaited (an error
    // unwinding) leaks its buffer rather than free memory a transfer may still fill.
    if (ticket_ == 0 && buffer_ != nullptr) free_host_buffer(buffer_);
}

uint64_t ParamTier::capacity_for(int64_t numel, DType dtype) {
    return align_up(static_cast<uint64_t>(numel) * dtype_size(dtype));
}

ParamTier::ParamTier(std::unique_ptr<Store> store, int64_t numel, DType dtype)
    : store_(std::move(store)), numel_(numel), dtype_(dtype), es_(dtype_size(dtype)) {
    ZT_ASSERT(store_->capacity() >= capacity_for(numel, dtype), "ParamTier: store of ",
              store_->capacity(), " bytes for ", numel, " elements");
}

std::unique_ptr<ParamTier::Fetch> ParamTier::fetch(int64_t lo, int64_t n) {
    ZT_ASSERT(lo >= 0 && n >= 0 && lo + n <= numel_, "ParamTier::fetch [", lo, ", ", lo + n,
              ") outside ", numel_);
    std::unique_ptr<Fetch> f(new Fetch());
    if (n == 0) return f;  // nothing to read (a module none of whose elements this rank owns)
    const uint64_t b = static_cast<uint64_t>(lo) * es_, e = static_cast<uint64_t>(lo + n) * es_;
    if (const void* m = store_->mapped(0)) {
        f->data_ = static_cast<const char*>(m) + b;
        stats_.bytes_read += e - b;
        return f;
    }
    const uint64_t a = align_down(b), z = align_up(e);
    if (z == a) {  // nothing to read
        f->data_ = nullptr;
        return f;
    }
    f->buffer_ = alloc_host_buffer(z - a);
    f->data_ = static_cast<const char*>(f->buffer_) + (b - a);
    f->ticket_ = store_->read(a, f->buffer_, z - a);
    stats_.bytes_read += z - a;
    return f;
}

void ParamTier::wait(Fetch& f) {
    if (f.ticket_ == 0) return;
    Stopwatch sw;
    const Store::Ticket t = f.ticket_;
    f.ticket_ = 0;
    store_->wait(t);
    stats_.wait_s += sw.elapsed_s();
}

void ParamTier::write(int64_t lo, int64_t n, const void* src) {
    ZT_ASSERT(lo >= 0 && n >= 0 && lo + n <= numel_, "ParamTier::write [", lo, ", ", lo + n,
              ") outside ", numel_);
    const uint64_t b = static_cast<uint64_t>(lo) * es_, e = static_cast<uint64_t>(lo + n) * es_;
    if (void* m = store_->mapped(0)) {
        std::memcpy(static_cast<char*>(m) + b, src, e - b);
        stats_.bytes_written += e - b;
        return;
    }
    if (e == b) return;
    const uint64_t a = align_down(b), z = align_up(e);
    void* buf = alloc_host_buffer(z - a);
    char* c = static_cast<char*>(buf);
    // The partial blocks at the ends keep their other bytes: read them first.
    if (a < b) store_->wait(store_->read(a, c, kStoreAlign));
    if (e < z && (z - kStoreAlign > a || a == b))
        store_->wait(store_->read(z - kStoreAlign, c + (z - kStoreAlign - a), kStoreAlign));
    std::memcpy(c + (b - a), src, e - b);
    try {
        store_->wait(store_->write(a, c, z - a));
    } catch (...) {
        free_host_buffer(buf);
        throw;
    }
    free_host_buffer(buf);
    stats_.bytes_written += z - a;
}

ParamTierStats ParamTier::stats() const { return stats_; }

}  // namespace zt
