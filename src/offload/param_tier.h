// ZeRO-Infinity's parameter offload (zero_optimization.offload_param): the compute weights of a
// rank's owned range of the arena live on a tier (offload/store.h) instead of the device. ZeRO-3
// reads a module's owned slice before gathering it (parallel/zero_module_gather.h), prefetching
// in the recorded module order, and drops it after use; the offloaded optimizer step writes the
// updated slices back (offload/tiered_state.h). Element ranges need not be aligned: reads cover
// the aligned blocks around them, writes patch the partial blocks at their ends.
#pragma once

#include <cstdint>
#include <memory>

#include "offload/store.h"
#include "tensor/dtype.h"

namespace zt {

// What the parameter tier moved and waited for, since the start.
struct ParamTierStats {
    uint64_t bytes_read = 0;
    uint64_t bytes_written = 0;
    double wait_s = 0;  // blocked on reads the gathers needed
};

class ParamTier {
  public:
    // A read in flight (or done) of elements [lo, lo + n) of the owned range.
    class Fetch {
      public:
        ~Fetch();
        Fetch(const Fetch&) = delete;
        Fetch& operator=(const Fetch&) = delete;
        // The elements, valid after ParamTier::wait().
        const void* data() const { return data_; }

      private:
        friend class ParamTier;
        Fetch() = default;
        void* buffer_ = nullptr;  // aligned staging (owned), null where the store is mapped
        const void* data_ = nullptr;
        Store::Ticket ticket_ = 0;  // 0: nothing to wait for
    };

    // numel elements of `dtype`: the owned range. The store must hold capacity_for(numel, dtype).
    ParamTier(std::unique_ptr<Store> store, int64_t numel, DType dtype);
    static uint64_t capacity_for(int64_t numel, DType dtype);

    const char* tier() const { return store_->tier(); }
    int64_t numel() const { return numel_; }
    DType dtype() const { return dtype_; }
    // Starts reading elements [lo, lo + n) (owned-range indices); wait() before data().
    std::unique_ptr<Fetch> fetch(int64_t lo, int64_t n);
    void wait(Fetch& f);
    // Writes elements [lo, lo + n) from src (blocking): the updated compute weights.
    void write(int64_t lo, int64_t n, const void* src);
    ParamTierStats stats() const;

  private:
    std::unique_ptr<Store> store_;
    int64_t numel_;
    DType dtype_;
    size_t es_;
    ParamTierStats stats_;
};

}  // namespace zt
