// The fixed-order reduction against the formula of Note [Fixed-order reduction], element by
// element, with the destination aliasing a source.
#include "comm/reduce.h"

#include <gtest/gtest.h>

#include "comm/conformance.h"

namespace zt {
namespace {

TEST(FixedOrderReduce, MatchesFormulaForEveryType) {
    for (CommType t : conformance::kAllTypes) {
        for (int nsrc : {1, 2, 3, 5}) {
            const int64_t n = 4099;  // past two accumulation chunks, not a SIMD multiple
            std::vector<std::vector<char>> bufs;
            std::vector<const void*> srcs;
            for (int r = 0; r < nsrc; ++r) bufs.push_back(conformance::inputs(t, r, 0, n, 1));
            for (auto& b : bufs) srcs.push_back(b.data());
            std::vector<char> dst(bufs[0].size());
            comm_detail::reduce_fixed_order(srcs, dst.data(), n, t);
            const auto ranks = conformance::iota_ranks(nsrc);
            for (int64_t i = 0; i < n; ++i) {
                ASSERT_EQ(conformance::load_bits(t, dst.data(), i),
                          conformance::expected_sum_bits(t, ranks, i, 1))
                    << comm_type_name(t) << " nsrc " << nsrc << " element " << i;
            }
            // In place into the last source gives the same bits.
            comm_detail::reduce_fixed_order(srcs, bufs.back().data(), n, t);
            EXPECT_EQ(std::memcmp(bufs.back().data(), dst.data(),
                                  static_cast<size_t>(n) * comm_type_size(t)),
                      0);
        }
    }
}

TEST(FixedOrderReduce, OrderMattersInBf16) {
    // 256 + 1 + 1 in bf16 (8 significant bits): in f32 then rounded once it is 258; rounding
    // after each add would give 256. The single final rounding is the contract.
    std::vector<bf16> a{f32_to_bf16(256.0f)}, b{f32_to_bf16(1.0f)}, c{f32_to_bf16(1.0f)};
    std::vector<const void*> srcs{a.data(), b.data(), c.data()};
    bf16 out;
    comm_detail::reduce_fixed_order(srcs, &out, 1, CommType::kBF16);
    EXPECT_EQ(bf16_to_f32(out), 258.0f);
}

TEST(CommNames, TypesAndKinds) {
    EXPECT_EQ(comm_type_size(CommType::kBF16), 2u);
    EXPECT_EQ(comm_type_size(CommType::kI64), 8u);
    EXPECT_STREQ(comm_type_name(CommType::kU8), "u8");
    EXPECT_STREQ(collective_kind_name(CollectiveKind::kReduceScatter), "reduce_scatter");
    EXPECT_STREQ(collective_kind_name(CollectiveKind::kBarrier), "barrier");
}

}  // namespace
}  // namespace zt
