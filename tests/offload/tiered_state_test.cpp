#include "offload/tiered_state.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <vector>

#include "offload/host_store.h"
#include "offload/memory_state.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "util/random.h"

namespace zt {
namespace {

// A host store that is not addressable memory, as a file is not, and finishes requests only when
// waited for, last issued first: the streaming path with its reads ahead and writes behind.
class FileLikeStore final : public Store {
  public:
    explicit FileLikeStore(uint64_t bytes) : inner_(bytes) {}
    const char* tier() const override { return "nvme"; }
    uint64_t capacity() const override { return inner_.capacity(); }
    Ticket read(uint64_t offset, void* dst, size_t bytes) override {
        return queue({true, offset, dst, nullptr, bytes});
    }
    Ticket write(uint64_t offset, const void* src, size_t bytes) override {
        std::vector<std::byte> copy(static_cast<const std::byte*>(src),
                                    static_cast<const std::byte*>(src) + bytes);
        // The caller may not touch src until wait(); snapshot now to catch one that does.
        snapshots_.push_back(std::move(copy));
        return queue({false, offset, nullptr, snapshots_.back().data(), bytes, src});
    }
    void wait(Ticket t) override {
        Req& r = reqs_.at(t - 1);
        ASSERT_FALSE(r.done) << "ticket waited for twice";
        if (!r.read) {
            ASSERT_EQ(std::memcmp(r.snapshot, r.src, r.bytes), 0) << "buffer changed in flight";
        }
        r.done = true;
        if (r.read) {
            inner_.wait(inner_.read(r.offset, r.dst, r.bytes));
        } else {
            inner_.wait(inner_.write(r.offset, r.src, r.bytes));
        }
    }
    StoreStats stats() const override { return inner_.stats(); }

  private:
    struct Req {
        bool read;
        uint64_t offset;
        void* dst;
        const std::byte* snapshot;
        size_t bytes;
        const void* src = nullptr;
        bool done = false;
    };
    Ticket queue(Req r) {
        reqs_.push_back(r);
        return reqs_.size();
    }
    HostStore inner_;
    std::deque<Req> reqs_;
    std::deque<std::vector<std::byte>> snapshots_;
};

std::vector<float> random_vec(int64_t n, uint64_t seed, float scale) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
        v[static_cast<size_t>(i)] =
            scale * static_cast<float>(normal01(seed, 7, static_cast<uint64_t>(i)));
    return v;
}

struct Case {
    int64_t numel;
    int64_t sub_group;
    int buffers;
    DType compute;
    bool mapped;
};

class TieredStateMatchesMemory : public ::testing::TestWithParam<Case> {};

TEST_P(TieredStateMatchesMemory, SameBitsForMasterStateAndComputeCopy) {
    const Case c = GetParam();
    AdamWOptions ao;
    ao.weight_decay = 0.1;
    AdamW opt_mem(ao), opt_tier(ao);
    MemoryPool pool;
    const int64_t n = c.numel;
    // Two decayed parameters and one not, then padding left out of every segment.
    const int64_t pad = 3;
    const std::vector<OptimSegment> segs{
        {0, n / 3, true}, {n / 3, n / 3, false}, {2 * (n / 3), n - 2 * (n / 3) - pad, true}};
    std::vector<float> master(static_cast<size_t>(n));
    const size_t es = dtype_size(c.compute);
    std::vector<char> copy_mem(static_cast<size_t>(n) * es), copy_tier(copy_mem.size(), 1);
    MemoryState mem(opt_mem, pool, master.data(), n, {copy_mem.data(), c.compute});
    TieredStateOptions to;
    to.sub_group_size = c.sub_group;
    to.buffer_count = c.buffers;
    const uint64_t bytes = TieredState::store_bytes(opt_tier, n, to);
    std::unique_ptr<Store> store = c.mapped ? std::unique_ptr<Store>(new HostStore(bytes))
                                            : std::unique_ptr<Store>(new FileLikeStore(bytes));
    TieredState tier(opt_tier, n, {copy_tier.data(), c.compute}, std::move(store), to);
    const std::vector<float> init = random_vec(n, 1, 0.5f);
    auto fill = [&](int64_t lo, int64_t m, float* out) {
        for (int64_t i = 0; i < m; ++i)
            out[i] = i + lo < n - pad ? init[static_cast<size_t>(lo + i)] : 0.0f;
    };
    mem.init(fill);
    tier.init(fill);
    EXPECT_EQ(copy_mem, copy_tier);
    for (int64_t step = 1; step <= 3; ++step) {
        const std::vector<float> g = random_vec(n, 100 + static_cast<uint64_t>(step), 0.01f);
        mem.step(g.data(), segs, 1e-2f, step);
        tier.step(g.data(), segs, 1e-2f, step);
        ASSERT_EQ(copy_mem, copy_tier) << "compute copy after step " << step;
    }
    ASSERT_EQ(tier.names(), (std::vector<std::string>{"master", "exp_avg", "exp_avg_sq"}));
    for (int which = 0; which < 3; ++which) {
        std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
        mem.read(which, 0, n, a.data());
        tier.read(which, 0, n, b.data());
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
            << tier.names()[which];
    }
    const UpdateStateStats st = tier.stats();
    EXPECT_EQ(st.d2h_bytes, 3 * static_cast<uint64_t>(n) * sizeof(float));
    if (!c.mapped) {  // every step reads and writes each record once
        EXPECT_EQ(st.bytes_written - bytes, 3 * bytes) << "init wrote the records once";
        EXPECT_GE(st.bytes_read, 3 * bytes);
    }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, TieredStateMatchesMemory,
    ::testing::Values(Case{5000, 1500, 4, DType::kBF16, false},  // 3 sub-groups, last short
                      Case{5000, 1500, 1, DType::kF16, false},   // one buffer: no overlap
                      Case{5000, 1500, 2, DType::kF32, false},
                      Case{70001, 1 << 30, 4, DType::kBF16, false},  // one sub-group
                      Case{5000, 1024, 3, DType::kBF16, true},       // cpu tier: in place
                      Case{40000, 4096, 4, DType::kBF16, false}));

TEST(TieredState, ReadsAndWritesRangesAcrossSubGroups) {
    Sgd opt(SgdOptions{0.9, 0.0, false});
    TieredStateOptions to;
    to.sub_group_size = 1024;
    to.buffer_count = 2;
    const int64_t n = 3000;
    std::vector<uint16_t> copy(static_cast<size_t>(n));
    TieredState t(opt, n, {copy.data(), DType::kBF16},
                  std::make_unique<FileLikeStore>(TieredState::store_bytes(opt, n, to)), to);
    EXPECT_EQ(t.names(), (std::vector<std::string>{"master", "momentum_buffer"}));
    t.init([](int64_t lo, int64_t m, float* out) {
        for (int64_t i = 0; i < m; ++i) out[i] = static_cast<float>(lo + i);
    });
    std::vector<float> v(1500);
    t.read(0, 700, 1500, v.data());  // spans sub-groups 0, 1 and 2
    for (int64_t i = 0; i < 1500; ++i) ASSERT_EQ(v[static_cast<size_t>(i)], 700.0f + i);
    std::vector<float> w(2000, -2.0f);
    t.write(1, 1000, 2000, w.data());
    t.read(1, 0, n, std::vector<float>(n).data());
    std::vector<float> back(static_cast<size_t>(n));
    t.read(1, 0, n, back.data());
    for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(back[static_cast<size_t>(i)], i >= 1000 ? -2.0f : 0.0f) << i;
    t.write(0, 0, 1, std::vector<float>{1.0f}.data());
    t.refresh_compute();
    EXPECT_EQ(copy[0], 0x3f80);  // bf16 1.0
    EXPECT_EQ(copy[2999], f32_to_bf16(2999.0f).bits);
}

}  // namespace
}  // namespace zt
