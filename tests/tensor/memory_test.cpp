// MemoryPool's tags, live-block report, event sink and budget (Note [Pool guarantees]).
#include "tensor/memory.h"

#include <gtest/gtest.h>

#include <vector>

#include "tensor/tensor.h"

namespace zt {

namespace {

struct Recorded {
    MemoryEvent::Op op;
    int64_t bytes;
    MemCategory category;
    MemPhase phase;
    std::string module;
};

class RecordingSink : public MemoryEventSink {
  public:
    void on_event(const MemoryEvent& e) noexcept override {
        events.push_back({e.op, e.bytes, e.category, e.phase, *e.module_name});
    }
    std::vector<Recorded> events;
};

constexpr int64_t kLine = static_cast<int64_t>(MemoryPool::kAlignment);
int64_t rounded(int64_t bytes) { return (bytes + kLine - 1) / kLine * kLine; }

}  // namespace

TEST(MemoryPool, ScopesTagAllocationsAndRestore) {
    MemoryPool pool;
    EXPECT_EQ(pool.context().module, 0u);
    EXPECT_EQ(pool.context().phase, MemPhase::kOther);
    Tensor outer, inner, opt;
    {
        MemScope a(pool, "encoder", MemPhase::kForward);
        outer = Tensor::empty(pool, {100}, DType::kF32, MemCategory::kActivations);
        {
            MemScope b(pool, "encoder.mlp", MemPhase::kForward);
            inner = Tensor::empty(pool, {1000}, DType::kF32, MemCategory::kActivations);
        }
        EXPECT_EQ(pool.module_name(pool.context().module), "encoder");
        MemScope c(pool, MemPhase::kOptimizer);  // phase only: the module stays
        opt = Tensor::empty(pool, {10}, DType::kF32, MemCategory::kOptimizer);
    }
    EXPECT_EQ(pool.context().module, 0u);
    EXPECT_EQ(pool.context().phase, MemPhase::kOther);
    std::vector<LiveTensorGroup> live = pool.largest_live(10);
    ASSERT_EQ(live.size(), 3u);
    EXPECT_EQ(live[0].bytes, rounded(4000));
    EXPECT_EQ(live[0].module, "encoder.mlp");
    EXPECT_EQ(live[0].phase, MemPhase::kForward);
    EXPECT_EQ(live[1].module, "encoder");
    EXPECT_EQ(live[2].module, "encoder");
    EXPECT_EQ(live[2].phase, MemPhase::kOptimizer);
    EXPECT_EQ(live[2].category, MemCategory::kOptimizer);
    auto by_module = pool.live_by_module(10);
    ASSERT_EQ(by_module.size(), 2u);
    EXPECT_EQ(by_module[0].first, "encoder.mlp");
    EXPECT_EQ(by_module[1].second, rounded(400) + rounded(40));
    inner = Tensor();
    EXPECT_EQ(pool.largest_live(10).size(), 2u) << "a freed block left the live set";
    EXPECT_EQ(pool.stats().live_blocks, 2);
}

TEST(MemoryPool, LargestLiveGroupsEqualBlocks) {
    MemoryPool pool;
    MemScope s(pool, "layer", MemPhase::kForward);
    std::vector<Tensor> keep;
    for (int i = 0; i < 3; ++i)
        keep.push_back(Tensor::empty(pool, {64}, DType::kF32, MemCategory::kActivations));
    keep.push_back(Tensor::empty(pool, {16}, DType::kF32, MemCategory::kActivations));
    auto live = pool.largest_live(1);
    ASSERT_EQ(live.size(), 1u);
    EXPECT_EQ(live[0].count, 3);
    EXPECT_EQ(live[0].bytes, 256);
}

TEST(MemoryPool, SinkSeesAllocFreePairsWithTheBlocksModule) {
    MemoryPool pool;
    RecordingSink sink;
    pool.set_event_sink(&sink);
    Tensor a;
    {
        MemScope s(pool, "block.0", MemPhase::kForward);
        a = Tensor::empty(pool, {10}, DType::kBF16, MemCategory::kActivations);  // 20 -> 64 bytes
        Tensor w = Tensor::empty(pool, {3}, DType::kF32, MemCategory::kWorkspace);
    }  // w freed in forward, inside block.0
    {
        MemScope s(pool, "head", MemPhase::kBackward);
        a = Tensor();  // freed during backward of another module: still block.0's bytes
    }
    pool.set_event_sink(nullptr);
    Tensor after = Tensor::empty(pool, {10}, DType::kF32, MemCategory::kGrads);
    ASSERT_EQ(sink.events.size(), 4u);
    const Recorded& e0 = sink.events[0];
    EXPECT_EQ(e0.op, MemoryEvent::Op::kAlloc);
    EXPECT_EQ(e0.bytes, 64);
    EXPECT_EQ(e0.category, MemCategory::kActivations);
    EXPECT_EQ(e0.module, "block.0");
    EXPECT_EQ(sink.events[1].category, MemCategory::kWorkspace);
    EXPECT_EQ(sink.events[2].op, MemoryEvent::Op::kFree);
    EXPECT_EQ(sink.events[2].category, MemCategory::kWorkspace);
    EXPECT_EQ(sink.events[2].phase, MemPhase::kForward);
    const Recorded& e3 = sink.events[3];
    EXPECT_EQ(e3.op, MemoryEvent::Op::kFree);
    EXPECT_EQ(e3.bytes, 64);
    EXPECT_EQ(e3.category, MemCategory::kActivations);
    EXPECT_EQ(e3.module, "block.0");
    EXPECT_EQ(e3.phase, MemPhase::kBackward);
    // Bytes balance per category: allocs minus frees is what is live.
    std::vector<int64_t> net(kMemCategoryCount, 0);
    for (const Recorded& e : sink.events)
        net[static_cast<int>(e.category)] += e.op == MemoryEvent::Op::kAlloc ? e.bytes : -e.bytes;
    for (int64_t n : net) EXPECT_EQ(n, 0);
}

TEST(MemoryPool, OutOfMemoryReportNamesTheLargestTensorsModule) {
    MemoryPool pool;
    RecordingSink sink;
    pool.set_event_sink(&sink);
    pool.set_budget(16 << 10);                                                       // 16 KiB
    Tensor params = Tensor::empty(pool, {1024}, DType::kF32, MemCategory::kParams);  // 4 KiB
    Tensor big;
    {
        MemScope s(pool, "transformer.h.3.mlp.c_fc", MemPhase::kForward);
        big = Tensor::empty(pool, {2048}, DType::kF32, MemCategory::kActivations);  // 8 KiB
    }
    MemScope s(pool, "transformer.h.3.mlp.c_proj", MemPhase::kForward);
    const MemoryStats before = pool.stats();
    try {
        Tensor more = Tensor::empty(pool, {2048}, DType::kF32, MemCategory::kActivations);
        FAIL() << "expected out of memory";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInput);
        const std::string m = e.message();
        EXPECT_NE(m.find("out of memory"), std::string::npos) << m;
        EXPECT_NE(m.find("in transformer.h.3.mlp.c_proj (forward)"), std::string::npos) << m;
        for (const char* cat : {"params", "grads", "optimizer", "activations", "comm", "workspace"})
            EXPECT_NE(m.find(cat), std::string::npos) << cat << " missing:\n" << m;
        size_t largest = m.find("largest live tensors:");
        ASSERT_NE(largest, std::string::npos) << m;
        size_t first_row = m.find('\n', largest) + 1;
        std::string row = m.substr(first_row, m.find('\n', first_row) - first_row);
        EXPECT_NE(row.find("transformer.h.3.mlp.c_fc"), std::string::npos) << m;
        EXPECT_NE(row.find("8.00 KiB"), std::string::npos) << m;
        EXPECT_NE(m.find("train_micro_batch_size_per_gpu"), std::string::npos) << m;
        EXPECT_NE(m.find("activation_checkpointing"), std::string::npos) << m;
        EXPECT_NE(m.find("67%"), std::string::npos) << "activations are 8 of 12 KiB live:\n" << m;
    }
    const MemoryStats after = pool.stats();
    EXPECT_EQ(after.total_current, before.total_current) << "a refused request changes nothing";
    EXPECT_EQ(after.system_allocs, before.system_allocs);
    ASSERT_FALSE(sink.events.empty());
    EXPECT_EQ(sink.events.back().op, MemoryEvent::Op::kOom);
    EXPECT_EQ(sink.events.back().module, "transformer.h.3.mlp.c_proj");
    pool.set_event_sink(nullptr);
}

TEST(MemoryPool, AdviceUsesHintsAndSkipsWhatIsOn) {
    MemoryStats s;
    s.current[static_cast<int>(MemCategory::kActivations)] = 600;
    s.current[static_cast<int>(MemCategory::kParams)] = 400;
    s.total_current = 1000;
    std::string a = oom_advice(s, 1000, 200, OomHints{8, 2, "none", "fp32"});
    EXPECT_NE(a.find("train_micro_batch_size_per_gpu 8 -> 4"), std::string::npos) << a;
    EXPECT_NE(a.find("gradient_accumulation_steps 2 -> 4"), std::string::npos) << a;
    EXPECT_NE(a.find("(enough for this allocation)"), std::string::npos) << "300 of 600 >= 200\n"
                                                                         << a;
    EXPECT_NE(a.find("\"policy\": \"every\""), std::string::npos) << a;
    EXPECT_NE(a.find("bf16"), std::string::npos) << a;
    std::string b = oom_advice(s, 1000, 400, OomHints{8, 1, "every", "bf16"});
    EXPECT_EQ(b.find("\"policy\": \"every\""), std::string::npos) << b;
    EXPECT_EQ(b.find("\"bf16\""), std::string::npos) << b;
    EXPECT_EQ(b.find("enough for this allocation"), std::string::npos) << "300 < 400\n" << b;
}

TEST(MemoryPool, BudgetCapsReservedBytesByReturningCachedBlocks) {
    MemoryPool pool;
    pool.set_budget(1024);
    {
        Tensor a = Tensor::empty(pool, {128}, DType::kF32, MemCategory::kActivations);
    }  // 512 cached
    EXPECT_EQ(pool.stats().reserved, 512);
    Tensor b = Tensor::empty(pool, {192}, DType::kF32, MemCategory::kActivations);  // 768: new size
    MemoryStats s = pool.stats();
    EXPECT_EQ(s.total_current, 768);
    EXPECT_LE(s.reserved, 1024) << "the cached 512-byte block went back to the system";
    EXPECT_EQ(s.system_allocs, 2);
}

TEST(MemoryPool, RepeatedPatternAllocatesFromTheSystemOnlyOnce) {
    MemoryPool pool;
    auto iteration = [&] {
        std::vector<Tensor> live;
        for (int64_t n : {100, 300, 100, 7, 300})
            live.push_back(Tensor::empty(pool, {n}, DType::kF32, MemCategory::kActivations));
        live.erase(live.begin() + 1);
        live.push_back(Tensor::empty(pool, {300}, DType::kF32, MemCategory::kActivations));
    };
    iteration();
    const int64_t first = pool.stats().system_allocs;
    EXPECT_EQ(first, 5);
    for (int i = 0; i < 3; ++i) iteration();
    EXPECT_EQ(pool.stats().system_allocs, first);
}

TEST(MemoryPool, LargeBlocksOfVaryingSizeReuseTheirSizeClass) {
    // A sparse batch's compact tables change size a little every step: from kClassMinBytes on,
    // sizes within one eighth of a power of two share a class and its cached block.
    MemoryPool pool;
    const int64_t base = static_cast<int64_t>(MemoryPool::kClassMinBytes) * 3 / 2;  // 96 KiB
    const int64_t step_bytes =
        static_cast<int64_t>(MemoryPool::kClassMinBytes) / 8;  // the class width
    int64_t reserved_first = 0;
    for (int i = 0; i < 6; ++i) {
        const int64_t bytes = base + 4 * (1 + (i * 1237) % (step_bytes / 4 - 1));  // one class
        Tensor t = Tensor::empty(pool, {bytes / 4}, DType::kF32, MemCategory::kActivations);
        EXPECT_EQ(pool.stats().current[static_cast<int>(MemCategory::kActivations)],
                  (bytes + 63) / 64 * 64)
            << "live bytes count the request, not the class";
        if (i == 0) reserved_first = pool.stats().reserved;
    }
    EXPECT_EQ(pool.stats().system_allocs, 1);
    EXPECT_EQ(pool.stats().reserved, reserved_first);
    EXPECT_EQ(reserved_first, base + step_bytes);
    // Small blocks keep exact sizes: 512 and 576 bytes are two blocks.
    { Tensor a = Tensor::empty(pool, {128}, DType::kF32, MemCategory::kActivations); }
    { Tensor b = Tensor::empty(pool, {144}, DType::kF32, MemCategory::kActivations); }
    EXPECT_EQ(pool.stats().system_allocs, 3);
}

}  // namespace zt
