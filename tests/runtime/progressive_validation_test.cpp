// Progressive validation's window in checkpoints (runtime/progressive_validation.h): saved and
// restored, it gives the same figures; a smaller window keeps the newest samples; bytes that are
// not a saved window are refused.
#include "runtime/progressive_validation.h"

#include <gtest/gtest.h>

#include "util/error.h"

namespace zt {
namespace {

void add_step(ProgressiveValidation& pv, int step, int n) {
    for (int k = 0; k < n; ++k) {
        pv.outputs()->push_back(static_cast<float>((step * 37 + k * 11) % 97) / 97.0f);
        pv.labels()->push_back(static_cast<float>((step + k) % 3 == 0));
    }
    pv.end_step();
}

TEST(ProgressiveValidation, WindowSavedAndRestoredGivesTheSameFigures) {
    ProgressiveValidation a(50, nullptr);
    for (int s = 0; s < 7; ++s) add_step(a, s, 10);  // 70 samples seen, the last 50 kept
    EXPECT_EQ(a.metrics()["samples"], 50);
    ProgressiveValidation b(50, nullptr);
    b.restore(a.save());
    EXPECT_EQ(b.metrics(), a.metrics());
    EXPECT_EQ(b.save(), a.save());
    add_step(a, 7, 10);
    add_step(b, 7, 10);
    EXPECT_EQ(b.metrics(), a.metrics());
    // A smaller window keeps the newest samples: as if it had seen them all.
    ProgressiveValidation small(20, nullptr), direct(20, nullptr);
    small.restore(a.save());
    for (int s = 6; s < 8; ++s) add_step(direct, s, 10);
    EXPECT_EQ(small.metrics(), direct.metrics());
    // Not a window.
    EXPECT_THROW(b.restore("ZTPV1"), Error);
    std::string cut = a.save();
    cut.pop_back();
    EXPECT_THROW(b.restore(cut), Error);
    EXPECT_THROW(b.restore(std::string(100, 'x')), Error);
}

}  // namespace
}  // namespace zt
