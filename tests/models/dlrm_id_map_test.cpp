// A compacted table's lookups (models/dlrm/dlrm_id_map.h) against the masked table they replace:
// a (R, D) table with some rows all zero, and the smaller table of its other rows with the id map
// export --compact writes. Bags with removed ids, a bag of removed ids only, an empty bag and a
// repeated id, for sum (same bits), weighted sum (same bits) and mean pooling (fp32 rounding);
// the kept rows' gradients equal the masked table's; out-of-range ids and bad maps are refused.
#include "models/dlrm/dlrm_id_map.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "autograd/dlrm_test_util.h"
#include "checkpoint/safetensors.h"
#include "models/dlrm/dlrm.h"
#include "util/error.h"

namespace zt {
namespace {

using namespace dlrm_test;

constexpr int64_t kR = 10, kD = 5;  // D not a multiple of the SIMD width
const std::vector<int64_t> kRemoved = {2, 5, 7};

struct Tables {
    std::vector<float> full, small;
    std::vector<int32_t> map;
};

Tables make_tables() {
    Tables t;
    t.full = uniform_values(kR * kD, 7, 1.0f);
    for (int64_t r : kRemoved)
        std::fill(t.full.begin() + r * kD, t.full.begin() + (r + 1) * kD, 0.0f);
    const std::vector<uint8_t> zero = zero_rows(t.full.data(), kR, kD);
    for (int64_t r = 0; r < kR; ++r) {
        const bool removed = std::find(kRemoved.begin(), kRemoved.end(), r) != kRemoved.end();
        EXPECT_EQ(zero[static_cast<size_t>(r)], removed ? 1 : 0) << r;
        if (removed) {
            t.map.push_back(-1);
            continue;
        }
        t.map.push_back(static_cast<int32_t>(t.small.size() / kD));
        t.small.insert(t.small.end(), t.full.begin() + r * kD, t.full.begin() + (r + 1) * kD);
    }
    return t;
}

// Bags: {0, 2, 3}, {5, 7} (removed only), {}, {1, 1, 9, 2}.
const std::vector<int64_t> kIds = {0, 2, 3, 5, 7, 1, 1, 9, 2};
const std::vector<int64_t> kOffsets = {0, 3, 5, 5, 9};

// Forward and the table's gradient of sum_i r_i y_i, for the masked and the compact table.
struct Result {
    std::vector<float> y, grad;
};

Result run(const std::vector<float>& table, int64_t rows, std::span<const int64_t> ids,
           std::span<const int64_t> offsets, std::span<const float> weights,
           ops::BagPooling pooling) {
    MemoryPool pool;
    Tape tape(pool);
    Var t = make_param(pool, {rows, kD}, table, DType::kF32,
                       std::vector<float>(static_cast<size_t>(rows * kD), 0.0f));
    Var y = ops::embedding_bag(tape, t, ids, offsets, weights, pooling);
    const std::vector<float> r = uniform_values(y->value.numel(), 3, 1.0f);
    tape.backward(weighted_sum(tape, y, r));
    return {y->value.to_vector(), t->grad.to_vector()};
}

void expect_same(ops::BagPooling pooling, const std::vector<float>& weights, bool exact) {
    const Tables t = make_tables();
    const Result masked = run(t.full, kR, kIds, kOffsets, weights, pooling);
    const MappedBags m = map_bags(t.map, kIds, kOffsets, weights, pooling, "emb_l.0.weight");
    const std::vector<int64_t> rows(m.ids.begin(), m.ids.end());
    const Result compact = run(t.small, kR - 3, rows, m.offsets, m.weights, ops::BagPooling::kSum);
    ASSERT_EQ(m.offsets.size(), kOffsets.size());
    EXPECT_EQ(m.offsets[2] - m.offsets[1], 0);  // the bag of removed ids is empty
    ASSERT_EQ(masked.y.size(), compact.y.size());
    for (size_t i = 0; i < masked.y.size(); ++i) {
        if (exact)
            EXPECT_EQ(compact.y[i], masked.y[i]) << i;
        else  // one rounding per id (weight 1 / count) instead of one per bag
            EXPECT_NEAR(compact.y[i], masked.y[i], 1e-6 * (1 + std::abs(masked.y[i]))) << i;
    }
    for (int64_t r = 0; r < kR; ++r) {
        const int32_t row = t.map[static_cast<size_t>(r)];
        for (int64_t d = 0; d < kD; ++d) {
            const float g = masked.grad[static_cast<size_t>(r * kD + d)];
            if (row < 0) continue;  // the masked model zeroes a pruned row's gradient
            EXPECT_EQ(compact.grad[static_cast<size_t>(row * kD + d)], g) << r << " " << d;
        }
    }
}

TEST(DlrmIdMap, SumPoolingGivesTheMaskedTablesBits) {
    expect_same(ops::BagPooling::kSum, {}, true);
}

TEST(DlrmIdMap, WeightedSumGivesTheMaskedTablesBits) {
    expect_same(ops::BagPooling::kSum, uniform_values(static_cast<int64_t>(kIds.size()), 5, 2.0f),
                true);
}

TEST(DlrmIdMap, MeanPoolingKeepsTheRawBagCount) {
    expect_same(ops::BagPooling::kMean, {}, false);
    // Bag {0, 2, 3} keeps 2 ids weighted 1/3 each; bag {1, 1, 9, 2} 3 ids weighted 1/4.
    const Tables t = make_tables();
    const MappedBags m = map_bags(t.map, kIds, kOffsets, {}, ops::BagPooling::kMean, "t");
    EXPECT_EQ(m.weights, (std::vector<float>{1.0f / 3, 1.0f / 3, 0.25f, 0.25f, 0.25f}));
}

TEST(DlrmIdMap, RefusesIdsOutsideTheMapAndBadMaps) {
    const Tables t = make_tables();
    const std::vector<int64_t> ids = {0, static_cast<int64_t>(kR)};
    const std::vector<int64_t> offsets = {0, 2};
    try {
        map_bags(t.map, ids, offsets, {}, ops::BagPooling::kSum, "emb_l.1.weight");
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(e.message().find("raw id 10 is outside the id map's range [0, 10)"),
                  std::string::npos)
            << e.message();
    }
    // A map file whose kept rows do not match model.tables[K].rows.
    const std::string path = ::testing::TempDir() + "/bad.id_map.safetensors";
    SafetensorsWriter w;
    w.add(dlrm_id_map_name(0), "I32", {kR}, t.map.data(), t.map.size() * 4);
    w.write(path);
    DlrmTable table;
    table.rows = kR - 4;  // 7 rows are kept: raw id 9 names row 6
    table.dim = kD;
    table.id_range = kR;
    table.id_map = path;
    try {
        read_dlrm_id_map(table, 0);
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(e.message().find("model.tables[0].id_map: raw id 9 maps to"), std::string::npos)
            << e.message();
    }
    table.rows = kR - 3;
    EXPECT_EQ(read_dlrm_id_map(table, 0), t.map);
}

}  // namespace
}  // namespace zt
