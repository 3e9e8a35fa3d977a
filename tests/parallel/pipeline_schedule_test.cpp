// Pipeline schedules: every stage runs each (micro, chunk) forward, backward and W exactly once and
// in dependency order; 1F1B and interleaved orders follow their definitions; the simulator's
// bubble matches the textbook formulas and its activation count the schedules' memory claims; a
// broken order is reported by stage and micro-batch; bad options are rejected with the key.
#include "parallel/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "util/error.h"

namespace zt {
namespace {

using Order = std::vector<std::vector<PipeOp>>;

constexpr PipeSchedule kSchedules[] = {PipeSchedule::kGpipe, PipeSchedule::kOneFOneB,
                                       PipeSchedule::kInterleaved, PipeSchedule::kZeroBubble};

PipeOp F(int micro, int chunk = 0) { return {PipeOpKind::kForward, micro, chunk}; }
PipeOp B(int micro, int chunk = 0) { return {PipeOpKind::kBackward, micro, chunk}; }
PipeOp W(int micro, int chunk = 0) { return {PipeOpKind::kWeightGrad, micro, chunk}; }

PipeOptions opts(PipeSchedule s, int p, int m, int v = 1) {
    return PipeOptions{.stages = p, .micro_batches = m, .virtual_stages = v, .schedule = s};
}

std::string name(const PipeOptions& o) {
    return str_cat(pipe_schedule_name(o.schedule), " p ", o.stages, " m ", o.micro_batches, " v ",
                   o.virtual_stages);
}

// Every valid option set with p in 1..4, m in 1..8 (interleaved: v in 2..3, m a multiple of p).
std::vector<PipeOptions> all_options() {
    std::vector<PipeOptions> all;
    for (PipeSchedule s : kSchedules)
        for (int p = 1; p <= 4; ++p)
            for (int m = 1; m <= 8; ++m) {
                if (s != PipeSchedule::kInterleaved) {
                    all.push_back(opts(s, p, m));
                    continue;
                }
                if (m % p != 0) continue;
                for (int v = 2; v <= 3; ++v) all.push_back(opts(s, p, m, v));
            }
    return all;
}

std::string error_of(auto&& f) {
    try {
        f();
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInput);
        return e.message();
    }
    return "(no error)";
}

void expect_mentions(const std::string& message, const std::vector<std::string>& parts) {
    for (const std::string& p : parts)
        EXPECT_NE(message.find(p), std::string::npos) << "expected \"" << p << "\" in: " << message;
}

TEST(PipeSchedule, ParseAndPrintConfigNames) {
    for (PipeSchedule s : kSchedules) EXPECT_EQ(parse_pipe_schedule(pipe_schedule_name(s)), s);
    EXPECT_STREQ(pipe_schedule_name(PipeSchedule::kOneFOneB), "1f1b");
    EXPECT_STREQ(pipe_schedule_name(PipeSchedule::kZeroBubble), "zero_bubble");
    expect_mentions(error_of([] { parse_pipe_schedule("1F1B"); }),
                    {"parallel.pipeline.schedule", "\"1F1B\"", "\"gpipe\"", "\"1f1b\"",
                     "\"interleaved\"", "\"zero_bubble\""});
}

// Each (micro, chunk) has one F, one backward and (zero bubble only) one W on every stage, in
// the order F, B, W within the stage's list; and the whole order runs without deadlock.
TEST(PipeSchedule, EveryOpOnceAndInDependencyOrder) {
    for (const PipeOptions& o : all_options()) {
        SCOPED_TRACE(name(o));
        const Order order = pipe_schedule(o);
        ASSERT_EQ(order.size(), static_cast<size_t>(o.stages));
        const int kinds = o.schedule == PipeSchedule::kZeroBubble ? 3 : 2;
        for (const std::vector<PipeOp>& list : order) {
            EXPECT_EQ(list.size(), static_cast<size_t>(kinds * o.micro_batches * o.virtual_stages));
            std::map<std::tuple<int, int, int>, int> count;  // (kind, micro, chunk)
            for (const PipeOp& op : list) {
                ASSERT_TRUE(op.micro >= 0 && op.micro < o.micro_batches);
                ASSERT_TRUE(op.chunk >= 0 && op.chunk < o.virtual_stages);
                // What must come before op on this stage has come: F before B, B before W.
                const int kind = static_cast<int>(op.kind);
                if (kind > 0) {
                    EXPECT_EQ((count[{kind - 1, op.micro, op.chunk}]), 1);
                }
                ++count[{kind, op.micro, op.chunk}];
            }
            for (int k = 0; k < kinds; ++k)
                for (int i = 0; i < o.micro_batches; ++i)
                    for (int c = 0; c < o.virtual_stages; ++c) EXPECT_EQ((count[{k, i, c}]), 1);
        }
        EXPECT_NO_THROW(check_pipe_order(o, order));
    }
}

// p = 4, m = 8. Stage s warms up with w = p - s - 1 forwards, then alternates F(w + i), B(i)
// until the forwards run out, then runs the last w backwards:
//   stage 0 (w = 3): F0 F1 F2 | F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 | B5 B6 B7
//   stage 3 (w = 0): F0 B0 F1 B1 ... F7 B7
TEST(PipeSchedule, OneFOneBFollowsTheDefinition) {
    const Order order = pipe_schedule(opts(PipeSchedule::kOneFOneB, 4, 8));
    EXPECT_EQ(order[0], (std::vector<PipeOp>{F(0), F(1), F(2), F(3), B(0), F(4), B(1), F(5), B(2),
                                             F(6), B(3), F(7), B(4), B(5), B(6), B(7)}));
    std::vector<PipeOp> last;
    for (int i = 0; i < 8; ++i) last.insert(last.end(), {F(i), B(i)});
    EXPECT_EQ(order[3], last);
    // The same rule, stated as counts, for every p and m: before backward j, stage s has run
    // min(m, j + p - s) forwards, and before forward i, max(0, i - (p - s - 1)) backwards.
    for (int p = 1; p <= 4; ++p)
        for (int m = 1; m <= 8; ++m) {
            const Order o = pipe_schedule(opts(PipeSchedule::kOneFOneB, p, m));
            for (int s = 0; s < p; ++s) {
                int f = 0, b = 0;
                for (const PipeOp& op : o[s]) {
                    if (op.kind == PipeOpKind::kForward) {
                        EXPECT_EQ(op.micro, f);
                        EXPECT_EQ(b, std::max(0, f - (p - s - 1))) << "p " << p << " m " << m;
                        ++f;
                    } else {
                        EXPECT_EQ(op.micro, b);
                        EXPECT_EQ(f, std::min(m, b + p - s)) << "p " << p << " m " << m;
                        ++b;
                    }
                }
            }
        }
}

// Megatron-LM's interleaved order, p = 2, v = 2, m = 4. Forwards in groups of p micro-batches
// per chunk: (0,c0) (1,c0) (0,c1) (1,c1) (2,c0) (3,c0) (2,c1) (3,c1); backwards the same with the
// chunks reversed: (0,c1) (1,c1) (0,c0) (1,c0) (2,c1) (3,c1) (2,c0) (3,c0). Warm-up
// (p - s - 1) * 2 + (v - 1) p: 4 forwards on stage 0, 2 on stage 1; then F, B pairs; then the
// remaining backwards.
TEST(PipeSchedule, InterleavedFollowsMegatron) {
    const Order order = pipe_schedule(opts(PipeSchedule::kInterleaved, 2, 4, 2));
    EXPECT_EQ(order[0], (std::vector<PipeOp>{F(0, 0), F(1, 0), F(0, 1), F(1, 1),  // warm-up
                                             F(2, 0), B(0, 1), F(3, 0), B(1, 1), F(2, 1), B(0, 0),
                                             F(3, 1), B(1, 0),  // steady
                                             B(2, 1), B(3, 1), B(2, 0), B(3, 0)}));
    EXPECT_EQ(order[1],
              (std::vector<PipeOp>{F(0, 0), F(1, 0),  // warm-up
                                   F(0, 1), B(0, 1), F(1, 1), B(1, 1), F(2, 0), B(0, 0), F(3, 0),
                                   B(1, 0), F(2, 1), B(2, 1), F(3, 1), B(3, 1), B(2, 0), B(3, 0)}));
    // m == p: Megatron runs every forward first.
    const Order all_warm = pipe_schedule(opts(PipeSchedule::kInterleaved, 2, 2, 2));
    for (const auto& list : all_warm)
        for (size_t i = 0; i < list.size(); ++i)
            EXPECT_EQ(list[i].kind, i < 4 ? PipeOpKind::kForward : PipeOpKind::kBackward);
}

// ZB-H1 keeps 1F1B's F and B order (so its memory) and delays W: stage s runs no W before its
// (s+1)-th B, and every W after its own B.
TEST(PipeSchedule, ZeroBubbleKeepsOneFOneBOrder) {
    for (int p = 1; p <= 4; ++p)
        for (int m = 1; m <= 8; ++m) {
            const Order zb = pipe_schedule(opts(PipeSchedule::kZeroBubble, p, m));
            const Order ofob = pipe_schedule(opts(PipeSchedule::kOneFOneB, p, m));
            for (int s = 0; s < p; ++s) {
                std::vector<PipeOp> fb;
                int b = 0;
                for (const PipeOp& op : zb[s]) {
                    if (op.kind != PipeOpKind::kWeightGrad) fb.push_back(op);
                    if (op.kind == PipeOpKind::kBackward) ++b;
                    if (op.kind == PipeOpKind::kWeightGrad && b < m) {
                        EXPECT_GT(b, s) << "p " << p << " m " << m << " stage " << s;
                    }
                }
                EXPECT_EQ(fb, ofob[s]);
            }
        }
}

// Interleaved holds (micro, chunk) pairs: its warm-up plus one, or all m v when m == p.
TEST(PipeSchedule, InterleavedPeakActivations) {
    for (int p = 1; p <= 4; ++p)
        for (int m = p; m <= 8; m += p)
            for (int v = 2; v <= 3; ++v) {
                const PipeOptions o = opts(PipeSchedule::kInterleaved, p, m, v);
                const PipeTimeline t = simulate_pipe(o, pipe_schedule(o), 1, 2, 0);
                for (int s = 0; s < p; ++s) {
                    const int warmup = (p - s - 1) * 2 + (v - 1) * p;
                    const int expected = m == p ? m * v : std::min(m * v, warmup + 1);
                    EXPECT_EQ(t.peak_in_flight[s], expected) << name(o) << " stage " << s;
                }
            }
}

TEST(PipeSchedule, PeakActivationsPerStage) {
    for (int p = 1; p <= 4; ++p)
        for (int m = 1; m <= 8; ++m) {
            SCOPED_TRACE(str_cat("p ", p, " m ", m));
            for (PipeSchedule s :
                 {PipeSchedule::kGpipe, PipeSchedule::kOneFOneB, PipeSchedule::kZeroBubble}) {
                const PipeOptions o = opts(s, p, m);
                const PipeTimeline t = simulate_pipe(o, pipe_schedule(o), 1, 2, 1);
                ASSERT_EQ(t.peak_in_flight.size(), static_cast<size_t>(p));
                for (int st = 0; st < p; ++st) {
                    // GPipe holds every micro-batch; 1F1B and ZB-H1 at most p - s.
                    const int expected = s == PipeSchedule::kGpipe ? m : std::min(m, p - st);
                    EXPECT_EQ(t.peak_in_flight[st], expected) << pipe_schedule_name(s);
                }
            }
        }
}

// Zero bubble keeps a micro-batch's deferred weight gradients from its B to its W (Note [Zero
// bubble memory], planner/cost_model.cpp); the count is read off each stage's op list.
TEST(PipeSchedule, PendingWeightGradsPerStage) {
    for (int p = 1; p <= 4; ++p)
        for (int m = 1; m <= 8; ++m) {
            SCOPED_TRACE(str_cat("p ", p, " m ", m));
            for (PipeSchedule s :
                 {PipeSchedule::kGpipe, PipeSchedule::kOneFOneB, PipeSchedule::kZeroBubble}) {
                const PipeOptions o = opts(s, p, m);
                const auto ops = pipe_schedule(o);
                const PipeTimeline t = simulate_pipe(o, ops, 1, 2, 1);
                ASSERT_EQ(t.peak_pending_w.size(), static_cast<size_t>(p));
                for (int st = 0; st < p; ++st) {
                    if (s != PipeSchedule::kZeroBubble) {
                        EXPECT_EQ(t.peak_pending_w[st], 0);
                        continue;
                    }
                    // The most B ops whose W has not run yet, at any point of the list.
                    std::set<int> pending;
                    size_t most = 0;
                    for (const PipeOp& op : ops[static_cast<size_t>(st)]) {
                        if (op.kind == PipeOpKind::kBackward) pending.insert(op.micro);
                        if (op.kind == PipeOpKind::kWeightGrad) pending.erase(op.micro);
                        most = std::max(most, pending.size());
                    }
                    EXPECT_EQ(t.peak_pending_w[st], static_cast<int>(most)) << "stage " << st;
                    EXPECT_GE(t.peak_pending_w[st], 1);
                    EXPECT_LE(t.peak_pending_w[st], std::min(m, p));
                }
            }
        }
}

// With no communication, GPipe and 1F1B take (m + p - 1)(t_f + t_b): bubble (p - 1) / m.
TEST(PipeSchedule, SimulatedBubbleMatchesFormula) {
    for (int p = 1; p <= 4; ++p)
        for (int m = 1; m <= 8; ++m)
            for (PipeSchedule s : {PipeSchedule::kGpipe, PipeSchedule::kOneFOneB}) {
                const PipeOptions o = opts(s, p, m);
                SCOPED_TRACE(name(o));
                const double formula = double(p - 1) / m;
                EXPECT_NEAR(pipe_bubble_formula(o), formula, 1e-12);
                const auto order = pipe_schedule(o);
                // t_b = 2 t_f, and equal costs (split as t_b + t_w = 2 + 1 outside zero bubble).
                for (auto [tf, tb, tw] : {std::tuple{1.0, 2.0, 0.0}, std::tuple{1.0, 1.0, 1.0}}) {
                    const PipeTimeline t = simulate_pipe(o, order, tf, tb, tw);
                    EXPECT_NEAR(t.bubble, formula, 1e-9);
                    EXPECT_NEAR(t.makespan, (m + p - 1) * (tf + tb + tw), 1e-9);
                    for (double busy : t.busy) EXPECT_NEAR(busy, m * (tf + tb + tw), 1e-9);
                }
            }
    for (int p = 1; p <= 4; ++p)
        for (int m = p; m <= 8; m += p)
            for (int v = 2; v <= 3; ++v) {
                const PipeOptions o = opts(PipeSchedule::kInterleaved, p, m, v);
                SCOPED_TRACE(name(o));
                const double formula = double(p - 1) / (v * m);
                EXPECT_NEAR(pipe_bubble_formula(o), formula, 1e-12);
                EXPECT_NEAR(simulate_pipe(o, pipe_schedule(o), 1, 2, 0).bubble, formula, 1e-9);
            }
}

// Equal F, B and W costs: ZB-H1's bubble is (p - 1) / (3 m), a third of 1F1B's, once the
// pipeline reaches its steady state (m >= p); below half of 1F1B's whenever m >= 2p.
TEST(PipeSchedule, ZeroBubbleCutsTheBubble) {
    for (int p = 2; p <= 4; ++p)
        for (int m = p; m <= 16; ++m) {
            const PipeOptions zb = opts(PipeSchedule::kZeroBubble, p, m);
            const PipeOptions ofob = opts(PipeSchedule::kOneFOneB, p, m);
            SCOPED_TRACE(name(zb));
            const double t_zb = simulate_pipe(zb, pipe_schedule(zb), 1, 1, 1).bubble;
            const double t_1f1b = simulate_pipe(ofob, pipe_schedule(ofob), 1, 1, 1).bubble;
            EXPECT_NEAR(t_zb, pipe_bubble_formula(zb), 1e-9);
            EXPECT_NEAR(pipe_bubble_formula(zb), pipe_bubble_formula(ofob) / 3, 1e-12);
            if (m >= 2 * p) {
                EXPECT_LT(t_zb, t_1f1b / 2);
            }
        }
}

// 1F1B, p = 4, m = 8, stage 0 with ops 2 and 4 swapped: F0 F1 B0 F3 F2 ... Stage 0 then wants
// micro-batch 0's gradient before it sends micro-batch 2 forward, while stage 1 (warm-up 2) must
// run forward 2 before its backward 0.
TEST(PipeSchedule, DeadlockIsReportedByStageAndMicroBatch) {
    const PipeOptions o = opts(PipeSchedule::kOneFOneB, 4, 8);
    Order order = pipe_schedule(o);
    std::swap(order[0][2], order[0][4]);
    ASSERT_EQ(order[0][2], B(0));
    const std::string msg = error_of([&] { check_pipe_order(o, order); });
    expect_mentions(msg, {"deadlock", "stage 0 is blocked at backward of micro-batch 0",
                          "the gradient of micro-batch 0 from stage 1, which is blocked at forward "
                          "of micro-batch 2",
                          "stage 1 is blocked at forward of micro-batch 2",
                          "the activations of micro-batch 2 from stage 0, which is blocked at "
                          "backward of micro-batch 0"});
    EXPECT_EQ(error_of([&] { simulate_pipe(o, order, 1, 2, 0); }), msg);

    // Interleaved, p = 2, v = 2, m = 4: stage 1 with ops 1 and 3 swapped runs B(0, c1) before its
    // own F(0, c1), and stage 0's F(1, c1) waits for chunk 0 of stage 1.
    const PipeOptions il = opts(PipeSchedule::kInterleaved, 2, 4, 2);
    Order il_order = pipe_schedule(il);
    std::swap(il_order[1][1], il_order[1][3]);
    expect_mentions(error_of([&] { check_pipe_order(il, il_order); }),
                    {"stage 0 is blocked at forward of micro-batch 1 on chunk 1",
                     "the activations of micro-batch 1 from chunk 0 of stage 1",
                     "stage 1 is blocked at backward of micro-batch 0 on chunk 1",
                     "its own forward of micro-batch 0 on chunk 1"});

    // A W ahead of its own B in zero bubble.
    const PipeOptions zb = opts(PipeSchedule::kZeroBubble, 2, 3);
    Order zb_order = pipe_schedule(zb);
    auto& last = zb_order[1];
    const auto w0 = std::find(last.begin(), last.end(), W(0));
    ASSERT_NE(w0, last.end());
    std::iter_swap(w0, std::find(last.begin(), last.end(), B(0)));
    expect_mentions(error_of([&] { check_pipe_order(zb, zb_order); }),
                    {"stage 1 is blocked at weight-grad of micro-batch 0",
                     "its own backward of micro-batch 0, which comes later in its list"});
}

// A simulator compiled once and run at many piece costs (the interleaved partition's search)
// gives each run the bits of a fresh simulation: no state leaks from one run into the next.
TEST(PipeSchedule, ReusedSimulatorGivesFreshRunsBits) {
    for (const PipeOptions& o : all_options()) {
        SCOPED_TRACE(name(o));
        const Order order = pipe_schedule(o);
        PipeSimulator sim(o, order);
        const size_t n = static_cast<size_t>(o.stages) * o.virtual_stages;
        for (int round = 0; round < 3; ++round) {
            std::vector<double> scale;
            for (size_t k = 0; k < n; ++k) scale.push_back(1.0 + 0.37 * ((k * 7 + round) % 5));
            const PipeTimeline fresh = simulate_pipe(o, order, 1.0, 2.0, 0.5, scale);
            const PipeTimeline again = sim.run(1.0, 2.0, 0.5, scale);
            EXPECT_EQ(again.makespan, fresh.makespan);
            EXPECT_EQ(again.busy, fresh.busy);
            EXPECT_EQ(again.bubble, fresh.bubble);
            EXPECT_EQ(again.peak_in_flight, fresh.peak_in_flight);
            EXPECT_EQ(again.peak_pending_w, fresh.peak_pending_w);
            EXPECT_EQ(sim.makespan(1.0, 2.0, 0.5, scale), fresh.makespan);
        }
    }
    // A deadlocked order fails on every run with the fresh simulation's message.
    const PipeOptions o = opts(PipeSchedule::kOneFOneB, 4, 8);
    Order order = pipe_schedule(o);
    std::swap(order[0][2], order[0][4]);
    PipeSimulator sim(o, order);
    const std::string msg = error_of([&] { check_pipe_order(o, order); });
    EXPECT_EQ(error_of([&] { sim.run(1, 1, 1); }), msg);
    EXPECT_EQ(error_of([&] { sim.run(1, 1, 1); }), msg);
    EXPECT_NE(error_of([&] { sim.run(1, 1, 1, std::vector<double>{1.0}); }).find("1 piece costs"),
              std::string::npos);
}

TEST(PipeSchedule, IncompleteOrdersAreRejected) {
    const PipeOptions o = opts(PipeSchedule::kOneFOneB, 2, 3);
    Order dup = pipe_schedule(o);
    dup[1][1] = F(0);  // stage 1: F0 F0 F1 B1 ... (B0 gone)
    expect_mentions(error_of([&] { check_pipe_order(o, dup); }),
                    {"stage 1 runs forward of micro-batch 0 2 times"});
    Order with_w = pipe_schedule(o);
    with_w[0].push_back(W(0));
    expect_mentions(error_of([&] { check_pipe_order(o, with_w); }),
                    {"stage 0", "zero_bubble schedule only", "\"1f1b\""});
    Order short_order = pipe_schedule(o);
    short_order.pop_back();
    expect_mentions(error_of([&] { check_pipe_order(o, short_order); }),
                    {"1 stage lists for 2 stages"});
    Order out_of_range = pipe_schedule(o);
    out_of_range[0][0].micro = 3;
    expect_mentions(error_of([&] { check_pipe_order(o, out_of_range); }),
                    {"stage 0", "micro-batch 3", "outside 3 micro-batches"});
}

TEST(PipeSchedule, ValidateRejectsBadOptions) {
    const auto err = [](PipeOptions o, int64_t blocks) {
        return error_of([&] { validate_pipe(o, blocks); });
    };
    EXPECT_EQ(err(opts(PipeSchedule::kOneFOneB, 4, 8), 4), "(no error)");
    EXPECT_EQ(err(opts(PipeSchedule::kInterleaved, 4, 8, 2), 8), "(no error)");
    EXPECT_EQ(err(opts(PipeSchedule::kZeroBubble, 3, 1), 7), "(no error)");
    expect_mentions(err(opts(PipeSchedule::kOneFOneB, 0, 8), 4),
                    {"parallel.pipeline.stages", ">= 1", "got 0"});
    expect_mentions(err(opts(PipeSchedule::kGpipe, 2, 0), 4),
                    {"micro-batches", "gradient_accumulation_steps", ">= 1", "got 0"});
    expect_mentions(err(opts(PipeSchedule::kOneFOneB, 2, 4, 2), 8),
                    {"parallel.pipeline.virtual_stages", "\"interleaved\"", "\"1f1b\""});
    expect_mentions(err(opts(PipeSchedule::kInterleaved, 2, 4, 1), 8),
                    {"parallel.pipeline.virtual_stages", "at least 2", "\"1f1b\""});
    expect_mentions(err(opts(PipeSchedule::kInterleaved, 2, 4, 0), 8),
                    {"parallel.pipeline.virtual_stages", ">= 1", "got 0"});
    expect_mentions(err(opts(PipeSchedule::kInterleaved, 4, 8, 2), 6),
                    {"parallel.pipeline.stages: 4 stages x 2 virtual stages need at least 8 "
                     "blocks, the model has 6"});
    expect_mentions(err(opts(PipeSchedule::kOneFOneB, 4, 8), 3),
                    {"parallel.pipeline.stages: 4 stages need at least 4 blocks, the model has 3"});
    // 10 blocks over 2 stages is 5 per stage, which 2 chunks do not split evenly.
    expect_mentions(err(opts(PipeSchedule::kInterleaved, 2, 4, 2), 10),
                    {"parallel.pipeline.virtual_stages", "10 blocks over 2 stages", "evenly",
                     "multiple of stages x virtual stages = 4"});
    // Megatron-LM: interleaved micro-batches in groups of p.
    expect_mentions(
        err(opts(PipeSchedule::kInterleaved, 4, 6, 2), 8),
        {"\"interleaved\"", "multiple of parallel.pipeline.stages (4)", "got 6", "use 4 or 8"});
    expect_mentions(err(opts(PipeSchedule::kInterleaved, 4, 2, 2), 8),
                    {"multiple of parallel.pipeline.stages (4)", "got 2", "use 4"});
    // pipe_schedule rejects what does not depend on the model.
    expect_mentions(error_of([] { pipe_schedule(opts(PipeSchedule::kInterleaved, 4, 6, 2)); }),
                    {"multiple of parallel.pipeline.stages (4)"});
}

}  // namespace
}  // namespace zt
