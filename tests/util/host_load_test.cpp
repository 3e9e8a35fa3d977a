// The host-load probe's parsing and arithmetic (util/host_load.h), on synthetic /proc text.
#include "util/host_load.h"

#include <gtest/gtest.h>

namespace zt {
namespace {

TEST(HostLoad, ParsesTheHostAndThisProcessesTicks) {
    // user nice system idle iowait irq softirq steal guest guest_nice
    const char* stat = "cpu  100 5 20 900 7 1 2 3 0 0\ncpu0 50 2 10 450 3 0 1 1 0 0\n";
    // A command name with a space and a parenthesis; utime 40, stime 9.
    const char* self = "123 (my (odd) app) S 1 123 123 0 -1 4194560 10 0 0 0 40 9 0 0 20 0 3";
    const auto t = parse_cpu_ticks(stat, self);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->host_busy, 100 + 5 + 20 + 1 + 2 + 3);  // idle and iowait left out
    EXPECT_EQ(t->self, 49);
    EXPECT_FALSE(parse_cpu_ticks("intr 5\n", self));
    EXPECT_FALSE(parse_cpu_ticks(stat, "123 no parenthesis"));
    EXPECT_FALSE(parse_cpu_ticks(stat, "123 (short) S 1 2"));
}

TEST(HostLoad, OtherCoresAreTheHostsBusyTicksLessOurs) {
    const CpuTicks a{1000, 300}, b{1300, 400};           // 300 busy ticks, 100 of them ours
    EXPECT_DOUBLE_EQ(other_cores(a, b, 2.0, 100), 1.0);  // 200 ticks over 2 s at 100 a second
    EXPECT_DOUBLE_EQ(other_cores(a, CpuTicks{1050, 360}, 1.0, 100), 0.0);  // never negative
    EXPECT_DOUBLE_EQ(other_cores(a, b, 0.0, 100), 0.0);
    const HostLoadProbe probe;  // on this machine: a number, whatever else runs
    EXPECT_GE(probe.other_cores(), 0.0);
}

}  // namespace
}  // namespace zt
