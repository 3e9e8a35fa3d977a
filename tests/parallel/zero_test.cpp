// What ZeRO's schedule does, read from recorded events rather than from bits (the equivalence
// tests show prefetch and overlap_comm change no bits; these show they act): a recording
// communicator logs each collective's issue and first wait on rank 0, module hooks log compute in
// between. A gather or reduction is "in flight across compute" when a module hook ran between its
// issue and its wait. The recorder answers test() with "not done", as a slow network would, so
// the schedule seen is the engine's own, not the threads' relative speed.
#include <gtest/gtest.h>

#include <memory>

#include "comm/local/local_comm.h"
#include "models/gpt/gpt.h"
#include "optim/sgd.h"
#include "parallel/recording_comm.h"
#include "runtime/engine.h"
#include "tensor/threads.h"

namespace zt {
namespace {

void hook_every_module(Module& m, Log* log) {
    for (HookPoint p : {HookPoint::kPreForward, HookPoint::kPostForward, HookPoint::kPreBackward,
                        HookPoint::kPostBackward})
        m.add_hook(p, [log](Module&) { log->push_back({Event::kHook}); });
    for (Module* c : m.children()) hook_every_module(*c, log);
}

constexpr int64_t kV = 40, kT = 8, kMicro = 2, kSteps = 3;

// Trains kSteps steps of a small GPT on 2 ranks (accumulation 1) and returns rank 0's events,
// from the first micro-step's start to the last one's end.
Log record_training(const ZeroOptions& zero) {
    std::vector<Log> logs(2);
    run_local_ranks(2, [&](Communicator& c) {
        set_num_threads(1);
        Log* log = &logs[static_cast<size_t>(c.rank())];
        RecordingComm rc(c, log);
        MemoryPool pool;
        EngineOptions eo;
        eo.optimizer = std::make_unique<Sgd>(SgdOptions{});
        eo.lr = 0.1;
        eo.comm = &rc;
        eo.zero = zero;
        Engine e(pool, std::make_unique<Gpt>(GptOptions{kV, kT, 16, 2, 2}), std::move(eo));
        hook_every_module(e.model(), log);  // after ZeRO's hooks: they run first
        log->clear();                       // the constructor's gathers are not a step's
        std::vector<int32_t> tokens(static_cast<size_t>(kMicro * kT));
        for (int64_t step = 0; step < kSteps; ++step) {
            for (size_t i = 0; i < tokens.size(); ++i)
                tokens[i] = static_cast<int32_t>((7 * i + 3 * static_cast<size_t>(step)) % kV);
            log->push_back({Event::kMicroStart});
            e.forward_backward(Batch{tokens, tokens, kMicro, kT});
            log->push_back({Event::kMicroEnd});
            e.step();
        }
    });
    return logs[0];
}

// Parameter gathers (all_gather of f32 compute weights; the step's norm and loss sums gather f64)
// issued inside micro-step `micro` (0-based), and how many of them were in flight across compute.
struct Count {
    int ops = 0, across = 0, issued_before_backward_end = 0;
};
Count count_ops(const Log& log, int micro, bool (*want)(const Event&)) {
    size_t begin = 0, end = 0;
    int seen = -1;
    for (size_t i = 0; i < log.size(); ++i) {
        if (log[i].kind == Event::kMicroStart && ++seen == micro) begin = i;
        if (log[i].kind == Event::kMicroEnd && seen == micro) end = i;
    }
    size_t last_hook = begin;  // the backward's end: the micro-step's last module hook
    for (size_t i = begin; i < end; ++i)
        if (log[i].kind == Event::kHook) last_hook = i;
    Count c;
    for (size_t i = begin; i < end; ++i) {
        if (log[i].kind != Event::kIssue || !want(log[i])) continue;
        ++c.ops;
        if (i < last_hook) ++c.issued_before_backward_end;
        bool hook = false;
        for (size_t j = i + 1; j < log.size(); ++j) {
            if (log[j].kind == Event::kWait && log[j].id == log[i].id) break;
            hook = hook || log[j].kind == Event::kHook;
        }
        if (hook) ++c.across;
    }
    return c;
}

bool is_param_gather(const Event& e) {
    return e.op == CollectiveKind::kAllGather && e.type == CommType::kF32;
}

ZeroOptions stage3(int64_t prefetch, int64_t max_live = 1000000000) {
    ZeroOptions z;
    z.stage = 3;
    z.overlap_comm = false;
    z.reduce_bucket_size = 1 << 30;
    z.persistence_threshold = 0;  // every module gathered around each use
    z.prefetch_bucket_size = prefetch;
    z.max_live_parameters = max_live;
    return z;
}

// Prefetch: the first micro-step records the gather order and prefetches nothing; later ones
// issue gathers ahead of use, while earlier modules compute. Off (prefetch 0, or no room under
// stage3_max_live_parameters), each gather is waited for as soon as it is issued.
TEST(ZeroSchedule, Stage3PrefetchIssuesGathersAheadOfUse) {
    const Log on = record_training(stage3(100000));
    const Count first = count_ops(on, 0, is_param_gather);
    EXPECT_GT(first.ops, 4);
    EXPECT_EQ(first.across, 0) << "prefetch while the gather order is still being recorded";
    for (int micro = 1; micro < kSteps; ++micro) {
        const Count c = count_ops(on, micro, is_param_gather);
        std::printf("[ sched ] prefetch on, micro-step %d: %d of %d gathers issued ahead\n",
                    micro + 1, c.across, c.ops);
        EXPECT_EQ(c.ops, first.ops) << "micro-step " << micro + 1;
        // All but two: the forward's first module, which nothing runs before, and the backward's
        // first, the forward's last module gathered again (prefetch skips the module in use).
        EXPECT_GE(c.across, c.ops - 2) << "micro-step " << micro + 1;
    }
    for (const ZeroOptions& off : {stage3(0), stage3(100000, 1)}) {
        const Log log = record_training(off);
        for (int micro = 0; micro < kSteps; ++micro) {
            const Count c = count_ops(log, micro, is_param_gather);
            EXPECT_EQ(c.ops, first.ops);
            EXPECT_EQ(c.across, 0) << "prefetch " << off.prefetch_bucket_size << ", max live "
                                   << off.max_live_parameters << ", micro-step " << micro + 1;
        }
    }
}

// overlap_comm: gradient buckets are reduced as soon as backward has finished them, while it goes
// on; without it, stage 0 reduces after backward and stage 2 waits for each reduction at once.
TEST(ZeroSchedule, OverlapCommReducesBucketsDuringBackward) {
    for (int stage : {0, 2}) {
        for (bool overlap : {true, false}) {
            ZeroOptions z;
            z.stage = stage;
            z.overlap_comm = overlap;
            z.reduce_bucket_size = 300;  // elements: several buckets
            const Log log = record_training(z);
            for (int micro = 0; micro < kSteps; ++micro) {
                const Count c = count_ops(log, micro, is_reduction);
                const std::string what = "stage " + std::to_string(stage) + ", overlap_comm " +
                                         (overlap ? "on" : "off") + ", micro-step " +
                                         std::to_string(micro + 1);
                std::printf(
                    "[ sched ] %s: %d reductions, %d issued during backward, %d in "
                    "flight across compute\n",
                    what.c_str(), c.ops, c.issued_before_backward_end, c.across);
                EXPECT_GT(c.ops, 2) << what;
                if (overlap) {
                    EXPECT_GE(c.issued_before_backward_end, c.ops - 1) << what;
                    EXPECT_GE(c.across, c.ops - 1) << what;
                } else {
                    EXPECT_EQ(c.across, 0) << what;
                    if (stage == 0) {
                        EXPECT_EQ(c.issued_before_backward_end, 0) << what;
                    }
                }
            }
        }
    }
}

// comm.priority (Note [Priority] in zero_grad_buckets.cpp): in a stage 3 backward with
// overlap_comm, a gradient bucket that fills is issued after the gathers the next module's
// backward issues (its weights, the prefetch), not before them. Read from the issue order between
// two module hooks: with priority, a window holding both a gather and a reduction issues the
// gathers first; without, reductions are issued right after their post-backward hook, so they
// come before the next window's gathers.
TEST(ZeroSchedule, Stage3IssuesTheNextGathersBeforeFullBuckets) {
    for (const bool priority : {false, true}) {
        ZeroOptions z = stage3(100000);
        z.overlap_comm = true;
        z.reduce_bucket_size = 300;
        z.priority = priority;
        const Log log = record_training(z);
        int gather_first = 0, reduction_first = 0, reductions = 0;
        // Windows: the ops issued between two hook events.
        size_t begin = 0;
        for (size_t i = 0; i <= log.size(); ++i) {
            if (i < log.size() && log[i].kind != Event::kHook) continue;
            int first_reduction = -1, last_gather = -1, first_gather = -1;
            for (size_t j = begin; j < i; ++j) {
                if (log[j].kind != Event::kIssue) continue;
                if (is_reduction(log[j])) {
                    ++reductions;
                    if (first_reduction < 0) first_reduction = static_cast<int>(j);
                }
                if (is_param_gather(log[j])) {
                    if (first_gather < 0) first_gather = static_cast<int>(j);
                    last_gather = static_cast<int>(j);
                }
            }
            if (first_reduction >= 0 && first_gather >= 0) {
                if (last_gather < first_reduction) ++gather_first;
                if (first_reduction < first_gather) ++reduction_first;
            }
            begin = i + 1;
        }
        std::printf(
            "[ sched ] priority %s: %d reductions; windows with gathers before "
            "reductions %d, reductions before gathers %d\n",
            priority ? "on" : "off", reductions, gather_first, reduction_first);
        EXPECT_GT(reductions, 2);
        EXPECT_EQ(reduction_first, 0) << "priority " << priority;
        if (priority) {
            EXPECT_GT(gather_first, 2);
        } else {
            EXPECT_EQ(gather_first, 0);
        }
    }
}

}  // namespace
}  // namespace zt
