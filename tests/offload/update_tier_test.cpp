#include "offload/update_tier.h"

#include <gtest/gtest.h>

#include <vector>

#include "offload/tiered_state.h"
#include "optim/adamw.h"

namespace zt {
namespace {

// The tier a config asks for, with its staging buffers: buffer_count of them, or one when
// aio.overlap_events is off (each transfer waited for as issued).
TEST(UpdateTier, DeviceBufferCountAndOverlapEventsChooseTheState) {
    AdamW adam(AdamWOptions{});
    MemoryPool pool;
    const int64_t n = 5000;
    std::vector<float> master(n);
    std::vector<uint16_t> copy(n);
    OffloadOptimizerOptions o;
    auto none = make_update_state(o, adam, pool, master.data(), n, {copy.data(), DType::kBF16}, "t");
    EXPECT_STREQ(none->tier(), "none");
    EXPECT_EQ(update_tier_bytes(o, adam, n), 0u);
    o.device = "cpu";
    o.sub_group_size = 2048;
    o.buffer_count = 3;
    auto cpu = make_update_state(o, adam, pool, nullptr, n, {copy.data(), DType::kBF16}, "t");
    EXPECT_STREQ(cpu->tier(), "cpu");
    TieredStateOptions t;
    t.sub_group_size = 2048;
    t.buffer_count = 3;
    EXPECT_EQ(cpu->stats().staging_bytes,
              static_cast<int64_t>(TieredState::staging_bytes(2, n, DType::kBF16, t, true)));
    EXPECT_EQ(update_tier_bytes(o, adam, n), TieredState::store_bytes(adam, n, t));
    o.aio.overlap_events = false;
    auto serial = make_update_state(o, adam, pool, nullptr, n, {copy.data(), DType::kBF16}, "t");
    t.buffer_count = 1;
    EXPECT_EQ(serial->stats().staging_bytes,
              static_cast<int64_t>(TieredState::staging_bytes(2, n, DType::kBF16, t, true)));
}

}  // namespace
}  // namespace zt
