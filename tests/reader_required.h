// Test helper: an outside reader (PyTorch, safetensors, TensorBoard, promtool, Chromium) that a
// test checks our output with. Without it the test skips, unless ZT_REQUIRE_READERS=1 (set by
// scripts/test.sh, so CI): then the missing reader is a failure, and a cross-check cannot vanish
// from CI unnoticed.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace zt::testing {

inline bool readers_required() {
    const char* v = std::getenv("ZT_REQUIRE_READERS");
    return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace zt::testing

// Skips the test (or fails it under ZT_REQUIRE_READERS=1) with `what` as the reason.
#define ZT_READER_MISSING(what)                                                             \
    do {                                                                                    \
        if (::zt::testing::readers_required())                                              \
            FAIL() << "required reader missing (ZT_REQUIRE_READERS=1): " << what;           \
        GTEST_SKIP() << what;                                                               \
    } while (0)
