// Pipeline stage partition (parallel/pipeline_partition.h): the balanced cut against a brute force
// over every cut, the explicit list's checks, and which chunks each rank gets.
#include "parallel/pipeline_partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "util/error.h"

namespace zt {
namespace {

// Every cut of the blocks into n pieces of at least one block.
void every_cut(int64_t blocks, int64_t n,
               const std::function<void(const std::vector<int64_t>&)>& f) {
    std::vector<int64_t> counts;
    std::function<void(int64_t)> go = [&](int64_t left) {
        if (static_cast<int64_t>(counts.size()) == n - 1) {
            counts.push_back(left);
            f(counts);
            counts.pop_back();
            return;
        }
        for (int64_t k = 1; k <= left - (n - 1 - static_cast<int64_t>(counts.size())); ++k) {
            counts.push_back(k);
            go(left - k);
            counts.pop_back();
        }
    };
    go(blocks);
}

// The least possible most expensive piece over every cut of the blocks into n pieces.
double brute_force_best(const PipeCosts& c, int n) {
    double best = 1e300;
    every_cut(static_cast<int64_t>(c.block.size()), n, [&](const std::vector<int64_t>& counts) {
        const std::vector<double> pc = piece_costs(counts, c);
        best = std::min(best, *std::max_element(pc.begin(), pc.end()));
    });
    return best;
}

TEST(PipePartition, BalancedIsAsGoodAsEveryCut) {
    for (int p : {2, 3, 4})
        for (double head : {0.0, 0.5, 3.0, 9.0}) {
            PipeCosts c;
            for (int i = 0; i < 9; ++i) c.block.push_back(1.0 + 0.25 * (i % 3));
            c.first = 0.2;
            c.last = head;
            const PipeOptions o{p, 4, 1, PipeSchedule::kOneFOneB};
            const std::vector<int64_t> counts = balanced_partition(o, c);
            ASSERT_EQ(static_cast<int>(counts.size()), p);
            check_partition(o, counts, 9);
            const std::vector<double> pc = piece_costs(counts, c);
            EXPECT_DOUBLE_EQ(*std::max_element(pc.begin(), pc.end()), brute_force_best(c, p))
                << "p " << p << " head " << head;
        }
}

TEST(PipePartition, Gpt2SmallOnTwoStagesMovesBlocksOffTheHeadsStage) {
    // Forward FLOPs per token: a block 24 C^2 + 4 T C, the head 2 C V (models/gpt/gpt_family.cpp).
    const double C = 768, T = 1024, V = 50304;
    PipeCosts c;
    c.block.assign(12, 24 * C * C + 4 * T * C);
    c.last = 2 * C * V;  // 4.47 blocks: 8 + 4 (8 and 8.47 blocks) beats 9 + 3 and 7 + 5
    EXPECT_EQ(balanced_partition({2, 4, 1, PipeSchedule::kOneFOneB}, c),
              (std::vector<int64_t>{8, 4}));
}

// The schedule's simulated step for a cut, each piece's ops scaled by its cost.
double span_of(const PipeOptions& o, const std::vector<int64_t>& counts, const PipeCosts& c) {
    const std::vector<double> pc = piece_costs(counts, c);
    return simulate_pipe(o, pipe_schedule(o), 1.0, 2.0, 0.0, pc).makespan;
}

TEST(PipePartition, InterleavedEqualBlocksWithoutAHeadKeepEqualPieces) {
    PipeCosts c;
    c.block.assign(8, 1.0);
    const PipeOptions o{2, 4, 2, PipeSchedule::kInterleaved};
    EXPECT_EQ(balanced_partition(o, c), (std::vector<int64_t>{2, 2, 2, 2}));
}

TEST(PipePartition, InterleavedPiecesTakeBlocksOffTheHeadsRank) {
    // GPT-2 small's 12 blocks with its head (4.47 blocks) on 2 ranks x 2 chunks: equal pieces
    // leave rank 1 with 10.47 block-units against rank 0's 6.
    const double C = 768, T = 1024, V = 50304;
    PipeCosts c;
    c.block.assign(12, 24 * C * C + 4 * T * C);
    c.last = 2 * C * V;
    const PipeOptions o{2, 8, 2, PipeSchedule::kInterleaved};
    const std::vector<int64_t> counts = balanced_partition(o, c);
    check_partition(o, counts, 12);
    const std::vector<double> pc = piece_costs(counts, c);
    const double rank0 = pc[0] + pc[2], rank1 = pc[1] + pc[3];
    EXPECT_LT(counts[1] + counts[3], 6) << "the head's rank holds fewer blocks";
    EXPECT_LT(std::max(rank0, rank1), (6 + 4.47 + 0.01) * c.block[0]);
    const std::vector<int64_t> equal(4, 3);
    EXPECT_LT(span_of(o, counts, c), 0.9 * span_of(o, equal, c));
}

TEST(PipePartition, InterleavedPiecesAreNearTheBestCut) {
    // Against every cut of 12 blocks: the local search's step is the best cut's.
    for (int p : {2, 3})
        for (int m : {p, 2 * p})
            for (double head : {0.0, 1.5, 4.0, 7.0}) {
                PipeCosts c;
                for (int i = 0; i < 12; ++i) c.block.push_back(1.0 + 0.25 * (i % 3));
                c.first = 0.3;
                c.last = head;
                const PipeOptions o{p, m, 2, PipeSchedule::kInterleaved};
                const std::vector<int64_t> got = balanced_partition(o, c);
                check_partition(o, got, 12);
                double best = 1e300;
                every_cut(12, 2 * p, [&](const std::vector<int64_t>& k) {
                    best = std::min(best, span_of(o, k, c));
                });
                EXPECT_NEAR(span_of(o, got, c), best, 1e-9 * best)
                    << "p " << p << " m " << m << " head " << head;
            }
}

TEST(PipePartition, InterleavedChunksGoToTheirRanks) {
    const PipeOptions o{2, 2, 2, PipeSchedule::kInterleaved};
    const std::vector<int64_t> counts{2, 2, 2, 2};
    const PipeStage s0 = pipe_stage(o, counts, 0), s1 = pipe_stage(o, counts, 1);
    EXPECT_EQ(s0.chunks, (std::vector<BlockRange>{{0, 2}, {4, 6}}));
    EXPECT_EQ(s1.chunks, (std::vector<BlockRange>{{2, 4}, {6, 8}}));
    EXPECT_TRUE(s0.first_piece(0));
    EXPECT_FALSE(s0.last_piece(1));
    EXPECT_TRUE(s1.last_piece(1));
    EXPECT_TRUE(s0.holds_first() && !s0.holds_last() && s1.holds_last());
    EXPECT_TRUE(s1.holds_block(7) && !s1.holds_block(4));
    check_partition(o, {3, 1, 2, 2}, 8);  // given: uneven pieces are the user's choice
    EXPECT_EQ(pipe_stage(o, {3, 1, 2, 2}, 1).chunks, (std::vector<BlockRange>{{3, 4}, {6, 8}}));
}

TEST(PipePartition, AnExplicitListIsChecked) {
    const PipeOptions o{2, 4, 1, PipeSchedule::kOneFOneB};
    check_partition(o, {3, 1}, 4);
    auto message = [&](const std::vector<int64_t>& counts) {
        try {
            check_partition(o, counts, 4);
        } catch (const Error& e) {
            return e.message();
        }
        return std::string();
    };
    EXPECT_NE(message({4}).find("expected 2 block counts"), std::string::npos);
    EXPECT_NE(message({4, 0}).find("entry 1 is 0"), std::string::npos);
    EXPECT_NE(message({2, 3}).find("add up to 5 blocks, the model has 4"), std::string::npos);
}

}  // namespace
}  // namespace zt
