// SegmentedStore: see segmented_store.h.
#include "offload/segmented_store.h"

#include <algorithm>

#include "util/error.h"

namespace zt {

namespace {

uint64_t round_up(uint64_t bytes) { return (bytes + kStoreAlign - 1) / kStoreAlign * kStoreAlign; }

}  // namespace

SegmentedStore::SegmentedStore(MakeSegment make, uint64_t bytes) : make_(std::move(make)) {
    ZT_ASSERT(bytes > 0, "SegmentedStore: an empty store");
    grow(bytes);
}

SegmentedStore::~SegmentedStore() {
    try {  // the segments' buffers must not be written after they go
        for (auto& [t, parts] : parts_)
            for (auto& [seg, inner] : parts) segments_[seg]->wait(inner);
    } catch (...) {  // a failed transfer is moot now
    }
}

void SegmentedStore::grow(uint64_t bytes) {
    if (bytes <= bytes_) return;
    const uint64_t add = round_up(bytes - bytes_);
    segments_.push_back(make_(add, static_cast<int>(segments_.size())));
    ZT_ASSERT(segments_.back()->capacity() >= add, "SegmentedStore: a segment short of bytes");
    begin_.push_back(bytes_);
    bytes_ += add;
}

size_t SegmentedStore::segment_at(uint64_t offset) const {
    const auto it = std::upper_bound(begin_.begin(), begin_.end(), offset);
    return static_cast<size_t>(it - begin_.begin()) - 1;
}

template <typename Issue>
Store::Ticket SegmentedStore::split(uint64_t offset, size_t bytes, Issue issue) {
    ZT_ASSERT(offset + bytes <= bytes_, "SegmentedStore: bytes [", offset, ", ", offset + bytes,
              ") outside its ", bytes_);
    std::vector<std::pair<size_t, Ticket>> parts;
    size_t done = 0;
    while (done < bytes) {
        const size_t seg = segment_at(offset + done);
        const uint64_t at = offset + done - begin_[seg];
        const auto n =
            static_cast<size_t>(std::min<uint64_t>(bytes - done, segments_[seg]->capacity() - at));
        parts.emplace_back(seg, issue(*segments_[seg], at, done, n));
        done += n;
    }
    const Ticket t = next_++;
    parts_.emplace(t, std::move(parts));
    return t;
}

Store::Ticket SegmentedStore::read(uint64_t offset, void* dst, size_t bytes) {
    return split(offset, bytes, [dst](Store& s, uint64_t at, size_t done, size_t n) {
        return s.read(at, static_cast<std::byte*>(dst) + done, n);
    });
}

Store::Ticket SegmentedStore::write(uint64_t offset, const void* src, size_t bytes) {
    return split(offset, bytes, [src](Store& s, uint64_t at, size_t done, size_t n) {
        return s.write(at, static_cast<const std::byte*>(src) + done, n);
    });
}

void SegmentedStore::wait(Ticket t) {
    const auto it = parts_.find(t);
    ZT_ASSERT(it != parts_.end(), "SegmentedStore: ticket ", t, " waited for twice or unknown");
    const std::vector<std::pair<size_t, Ticket>> parts = std::move(it->second);
    parts_.erase(it);
    for (const auto& [seg, inner] : parts) segments_[seg]->wait(inner);
}

StoreStats SegmentedStore::stats() const {
    StoreStats s;
    for (const auto& seg : segments_) {
        const StoreStats one = seg->stats();
        s.bytes_read += one.bytes_read;
        s.bytes_written += one.bytes_written;
        s.wait_s += one.wait_s;
    }
    return s;
}

void* SegmentedStore::mapped(uint64_t offset) {
    const size_t seg = segment_at(offset);
    return segments_[seg]->mapped(offset - begin_[seg]);
}

}  // namespace zt
