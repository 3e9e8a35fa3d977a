// The "cpu" tier: a store in host memory (offload/store.h). On a machine without an accelerator
// the per-rank budget models the device's memory and this is the host's: bytes here are outside
// the budget, and every transfer in or out is a real copy, counted, through the caller's staging
// buffers, as the device-to-host and host-to-device copies of a GPU run would be. Copies happen
// when a request is issued; wait() only checks the ticket.
#pragma once

#include <memory>

#include "offload/store.h"

namespace zt {

class HostStore final : public Store {
  public:
    explicit HostStore(uint64_t bytes);  // zeroed
    ~HostStore() override;
    HostStore(const HostStore&) = delete;
    HostStore& operator=(const HostStore&) = delete;

    const char* tier() const override { return "cpu"; }
    uint64_t capacity() const override { return bytes_; }
    Ticket read(uint64_t offset, void* dst, size_t bytes) override;
    Ticket write(uint64_t offset, const void* src, size_t bytes) override;
    void wait(Ticket t) override;
    StoreStats stats() const override { return stats_; }
    void* mapped(uint64_t offset) override { return data_ + offset; }

  private:
    void check(uint64_t offset, const void* buf, size_t bytes, const char* what) const;

    uint64_t bytes_;
    std::byte* data_;
    Ticket next_ = 1;
    StoreStats stats_;
};

}  // namespace zt
