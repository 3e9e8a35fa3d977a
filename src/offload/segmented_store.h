// SegmentedStore: a Store (offload/store.h) that grows. Its bytes are segments, each a store of
// its own (host memory or a swap file, made by a factory when the store grows), laid end to end,
// so a table whose rows keep arriving (dynamic embedding tables on a tier,
// embedding/dynamic_rows.h) adds bytes without copying or moving a byte already stored. A request
// that crosses a segment boundary is split there. Leaves out: shrinking.
#pragma once

#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "offload/store.h"

namespace zt {

class SegmentedStore final : public Store {
  public:
    // make(bytes, index): the index-th segment, of `bytes` bytes (a multiple of kStoreAlign).
    using MakeSegment = std::function<std::unique_ptr<Store>(uint64_t bytes, int index)>;
    // A store of `bytes` bytes (> 0, rounded up to kStoreAlign): its first segment.
    SegmentedStore(MakeSegment make, uint64_t bytes);
    ~SegmentedStore() override;
    SegmentedStore(const SegmentedStore&) = delete;
    SegmentedStore& operator=(const SegmentedStore&) = delete;

    // The capacity becomes at least `bytes`: one more segment, of the difference rounded up to
    // kStoreAlign (callers that grow by doubling keep the segments few).
    void grow(uint64_t bytes);
    int segments() const { return static_cast<int>(segments_.size()); }

    const char* tier() const override { return segments_.front()->tier(); }
    uint64_t capacity() const override { return bytes_; }
    Ticket read(uint64_t offset, void* dst, size_t bytes) override;
    Ticket write(uint64_t offset, const void* src, size_t bytes) override;
    void wait(Ticket t) override;
    StoreStats stats() const override;
    void* mapped(uint64_t offset) override;

  private:
    template <typename Issue>
    Ticket split(uint64_t offset, size_t bytes, Issue issue);
    size_t segment_at(uint64_t offset) const;  // the segment holding byte `offset`

    MakeSegment make_;
    std::vector<std::unique_ptr<Store>> segments_;
    std::vector<uint64_t> begin_;  // each segment's first byte
    uint64_t bytes_ = 0;
    // A ticket's parts: (segment, its ticket there).
    std::unordered_map<Ticket, std::vector<std::pair<size_t, Ticket>>> parts_;
    Ticket next_ = 1;
};

}  // namespace zt
