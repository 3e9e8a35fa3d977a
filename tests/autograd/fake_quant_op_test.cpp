// ops::fake_quant_rows: the forward is the kernel's (tensor/kernels/fake_quant.h), the
// straight-through gradient is the identity inside the clipping range and zero outside, for
// activations (written) and parameters (accumulated into the f32 gradient), f32 and bf16.
#include <gtest/gtest.h>

#include "autograd/dlrm_test_util.h"

namespace zt {
namespace {

using namespace dlrm_test;

TEST(FakeQuantOp, StraightThroughInsideTheClippingRangeZeroOutside) {
    const int64_t R = 4, K = 9;
    const std::vector<float> x = uniform_values(R * K, 1, 2.0f);
    const std::vector<float> r = uniform_values(R * K, 2, 1.0f);
    for (DType dt : {DType::kF32, DType::kBF16})
        for (float clip : {1.0f, 0.6f}) {
            MemoryPool pool;
            Tape tape(pool);
            Var in = make_input(pool, {R, K}, x, dt);
            Var y = ops::fake_quant_rows(tape, in, QuantFormat::kInt8, clip);
            std::vector<float> yk(x.size()), s(R), range(R);
            std::vector<float> xf =
                in->value.to(DType::kF32, MemCategory::kActivations).to_vector();
            kernels::fake_quant_rows(xf.data(), yk.data(), s.data(), R, K, QuantFormat::kInt8, clip,
                                     range.data());
            const std::vector<float> yv = y->value.to_vector();
            for (size_t i = 0; i < yv.size(); ++i)
                EXPECT_EQ(yv[i], dt == DType::kF32 ? yk[i] : round_bf16(yk[i])) << i;
            tape.backward(weighted_sum(tape, y, r), 1.0f);
            const std::vector<float> g = in->grad.to_vector();
            int64_t clipped = 0;
            for (int64_t row = 0; row < R; ++row)
                for (int64_t k = 0; k < K; ++k) {
                    const size_t i = static_cast<size_t>(row * K + k);
                    const bool inside = std::fabs(xf[i]) <= range[row];
                    clipped += inside ? 0 : 1;
                    const float want =
                        inside ? (dt == DType::kF32 ? r[i] : round_bf16(r[i])) : 0.0f;
                    EXPECT_EQ(g[i], want) << i;
                }
            if (clip == 1.0f)
                EXPECT_EQ(clipped, 0);
            else
                EXPECT_GT(clipped, 0);  // something was clipped: the zero branch is exercised
        }
}

TEST(FakeQuantOp, ParameterGradientAccumulates) {
    const int64_t R = 3, K = 5;
    const std::vector<float> w = uniform_values(R * K, 3, 1.0f);
    const std::vector<float> r = uniform_values(R * K, 4, 1.0f);
    const std::vector<float> g0(static_cast<size_t>(R * K), 0.5f);
    MemoryPool pool;
    Tape tape(pool);
    Var p = make_param(pool, {R, K}, w, DType::kF32, g0);
    Var y = ops::fake_quant_rows(tape, p, QuantFormat::kFp8E4M3, 1.0f);
    tape.backward(weighted_sum(tape, y, r), 1.0f);
    const std::vector<float> g = p->grad.to_vector();
    for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], 0.5f + r[i]) << i;
}

// A row split into column parts (a row-parallel Linear's on two ranks) quantizes like the whole
// row when whole_row_max gives each part the whole row's maximum, and like a row of its own
// without it; the clipping ranges (the backward's) are the whole row's too.
TEST(FakeQuantOp, PartsOfARowScaleByTheWholeRowsMaximum) {
    const int64_t R = 5, K = 12, half = K / 2;
    const std::vector<float> x = uniform_values(R * K, 7, 3.0f);
    MemoryPool pool;
    Tape tape(pool);
    const std::vector<float> whole =
        ops::fake_quant_rows(tape, make_input(pool, {R, K}, x, DType::kF32), QuantFormat::kInt8,
                             0.8f)
            ->value.to_vector();
    std::vector<std::vector<float>> parts(2);
    std::vector<float> row_max(static_cast<size_t>(R), 0.0f);
    for (int p = 0; p < 2; ++p)
        for (int64_t r = 0; r < R; ++r)
            for (int64_t k = 0; k < half; ++k) {
                const float v = x[static_cast<size_t>(r * K + p * half + k)];
                parts[static_cast<size_t>(p)].push_back(v);
                row_max[static_cast<size_t>(r)] =
                    std::max(row_max[static_cast<size_t>(r)], std::fabs(v));
            }
    int64_t differs_alone = 0;
    for (int p = 0; p < 2; ++p) {
        const std::vector<float>& part = parts[static_cast<size_t>(p)];
        const ops::RowMaxReduce reduce = [&](std::span<float> m) {
            ASSERT_EQ(static_cast<int64_t>(m.size()), R);
            for (int64_t r = 0; r < R; ++r) {
                EXPECT_LE(m[static_cast<size_t>(r)], row_max[static_cast<size_t>(r)]);
                m[static_cast<size_t>(r)] = row_max[static_cast<size_t>(r)];
            }
        };
        const std::vector<float> y =
            ops::fake_quant_rows(tape, make_input(pool, {R, half}, part, DType::kF32),
                                 QuantFormat::kInt8, 0.8f, reduce)
                ->value.to_vector();
        const std::vector<float> alone =
            ops::fake_quant_rows(tape, make_input(pool, {R, half}, part, DType::kF32),
                                 QuantFormat::kInt8, 0.8f)
                ->value.to_vector();
        for (int64_t r = 0; r < R; ++r)
            for (int64_t k = 0; k < half; ++k) {
                const size_t i = static_cast<size_t>(r * half + k);
                EXPECT_EQ(y[i], whole[static_cast<size_t>(r * K + p * half + k)]) << p << " " << i;
                differs_alone += alone[i] != y[i];
            }
    }
    EXPECT_GT(differs_alone, 0);  // the parts' own maxima give other values
}

}  // namespace
}  // namespace zt
