// zero_quantized_weights' metrics (ZeroDataParallel::weight_compression_stats): stage 3's gathers
// over 2 local ranks of a 2048-element arena, l0 [0, 1536) and l1 [1536, 2048); rank 0 owns
// [0, 1024), rank 1 [1024, 2048), so every slice a rank encodes (l0: 1024 and 512 values, l1: 0
// and 512) is a multiple of the codec's 256-value block. Blockwise int8 (comm/codec/codec.h) is
// one f32 scale per block then one byte a value, padded to 4 bytes: n values take n + 4 n / 256
// bytes, and each rank sends its slice to the R - 1 others. Raw bytes are the compute dtype's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/local/local_comm.h"
#include "parallel/zero.h"

namespace zt {
namespace {

constexpr int kRanks = 2;
constexpr int64_t kNumel = 2048, kBlock = 256;

class Leaf : public Module {
  public:
    explicit Leaf(int64_t n) { register_parameter("w", {n}, ParamInit::zeros(), true); }
};

class Net : public Module {
  public:
    Net() {
        register_module<Leaf>("l0", 1536);
        register_module<Leaf>("l1", 512);
    }
    Module& leaf(int i) { return *children()[static_cast<size_t>(i)]; }
};

// Values of different magnitude in each block, none exact in int8.
std::vector<float> weights() {
    std::vector<float> w(static_cast<size_t>(kNumel));
    for (int64_t i = 0; i < kNumel; ++i)
        w[static_cast<size_t>(i)] =
            std::sin(0.37f * static_cast<float>(i)) * static_cast<float>(1 + (i / kBlock) % 4);
    return w;
}

// Encoded bytes of n values in blockwise int8 at block 256 (block_codec.cpp's layout).
int64_t int8_bytes(int64_t n) {
    if (n == 0) return 0;
    const int64_t b = (n + kBlock - 1) / kBlock * 4 + n;
    return (b + 3) / 4 * 4;
}

struct Rank {
    MemoryPool pool;
    Net net;
    std::unique_ptr<ParamArena> arena;
    std::unique_ptr<ZeroDataParallel> dp;

    Rank(Communicator& comm, DType compute, bool quantized) {
        ZeroOptions z;
        z.stage = 3;
        z.persistence_threshold = 0;  // every module gathered around each use
        z.prefetch_bucket_size = 0;
        z.quantized_weights = quantized;
        arena = std::make_unique<ParamArena>(
            pool, net.parameters(),
            zero_arena_options(3, compute, DType::kF32, kNumel, comm.size(), comm.rank()));
        dp = std::make_unique<ZeroDataParallel>(pool, net, *arena, &comm, z);
        const std::vector<float> whole = weights();
        Tensor m = dp->update_master();
        const int64_t lo = dp->update_range().lo;
        std::copy(whole.begin() + lo, whole.begin() + lo + m.numel(), m.data<float>());
        arena->sync_compute();
        dp->after_update();  // no persistent units: gathers nothing
    }
    // Gathers each leaf around `pre` (a forward's or a backward's hooks); returns each leaf's
    // gathered values.
    std::vector<std::vector<float>> use_each_leaf(HookPoint pre, HookPoint post) {
        std::vector<std::vector<float>> out;
        for (int l = 0; l < 2; ++l) {
            net.leaf(l).run_hooks(pre);
            out.push_back(net.leaf(l).own_parameters()[0]->var->value.to_vector());
            net.leaf(l).run_hooks(post);
        }
        return out;
    }
};

TEST(ZeroWeightCompression, GathersCountBytesByTheCodecsLayoutAndTheDecodedError) {
    const std::vector<float> whole = weights();
    for (DType compute : {DType::kF32, DType::kBF16})
        run_local_ranks(kRanks, [&](Communicator& c) {
            const std::string what =
                std::string(dtype_name(compute)) + ", rank " + std::to_string(c.rank());
            Rank R(c, compute, true);
            ASSERT_NE(R.dp->weight_codec(), nullptr);
            EXPECT_EQ(R.dp->weight_compression_stats().raw_bytes, 0) << what;
            const auto gathered = R.use_each_leaf(HookPoint::kPreForward, HookPoint::kPostForward);
            const CompressionStats s = R.dp->weight_compression_stats();
            // This rank's slices: l0's and l1's parts of its owned half.
            const int64_t lo = 1024 * c.rank(), hi = lo + 1024;
            const int64_t slices[2] = {std::max<int64_t>(0, std::min<int64_t>(hi, 1536) - lo),
                                       std::max<int64_t>(0, hi - std::max<int64_t>(lo, 1536))};
            const auto es = static_cast<int64_t>(dtype_size(compute));
            int64_t raw = 0, wire = 0;
            for (int64_t n : slices) {
                EXPECT_EQ(n % kBlock, 0) << what;
                raw += es * n * (kRanks - 1);
                wire += int8_bytes(n) * (kRanks - 1);
            }
            EXPECT_EQ(s.raw_bytes, raw) << what;
            EXPECT_EQ(s.wire_bytes, wire) << what;
            // Whole blocks: n values take n (1 + 4 / 256) bytes against es n.
            EXPECT_DOUBLE_EQ(static_cast<double>(s.raw_bytes) / static_cast<double>(s.wire_bytes),
                             static_cast<double>(es) / (1.0 + 4.0 / kBlock))
                << what;
            // The codec's bound: each value within half a step, max |x| of its block / 254, so
            // sum e^2 <= sum over blocks of 256 amax^2 / 254^2.
            double input_sq = 0, bound_sq = 0, decoded_sq = 0;
            for (int64_t b = lo; b < hi; b += kBlock) {
                float amax = 0;
                for (int64_t i = b; i < b + kBlock; ++i) {
                    const double x = whole[static_cast<size_t>(i)];
                    amax = std::max(amax, std::fabs(whole[static_cast<size_t>(i)]));
                    input_sq += x * x;
                    const int l = i < 1536 ? 0 : 1;
                    const double y = gathered[static_cast<size_t>(l)]
                                             [static_cast<size_t>(i - (l == 0 ? 0 : 1536))];
                    decoded_sq += (y - x) * (y - x);
                }
                bound_sq += kBlock * static_cast<double>(amax) * amax / (254.0 * 254.0);
            }
            EXPECT_GT(s.error_sq, 0) << what;
            EXPECT_LE(s.error_sq, bound_sq) << what;
            if (compute == DType::kF32) {
                // The error counted is the decoded weights' against the originals.
                EXPECT_NEAR(s.input_sq, input_sq, 1e-5 * input_sq) << what;
                EXPECT_NEAR(s.error_sq, decoded_sq, 1e-4 * decoded_sq) << what;
            }
            // A backward gathers again: twice the bytes.
            R.use_each_leaf(HookPoint::kPreBackward, HookPoint::kPostBackward);
            const CompressionStats t = R.dp->weight_compression_stats();
            EXPECT_EQ(t.raw_bytes, 2 * raw) << what;
            EXPECT_EQ(t.wire_bytes, 2 * wire) << what;
        });
}

TEST(ZeroWeightCompression, PlainGathersCountNothing) {
    run_local_ranks(kRanks, [&](Communicator& c) {
        Rank R(c, DType::kF32, false);
        EXPECT_EQ(R.dp->weight_codec(), nullptr);
        R.use_each_leaf(HookPoint::kPreForward, HookPoint::kPostForward);
        EXPECT_EQ(R.dp->weight_compression_stats().raw_bytes, 0);
        EXPECT_EQ(R.dp->weight_compression_stats().wire_bytes, 0);
    });
}

}  // namespace
}  // namespace zt
