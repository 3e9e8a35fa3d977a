// The learnable toy sequences of the engine tests (equivalence, pruning, quantization): sample k
// starts at a random token and continues x -> (5x + 3) mod V. A rank's micro-batch m of a step
// holds the global samples the equivalence rule gives it (global_sample_index), so any dp size
// and accumulation see the same samples per step.
#pragma once

#include <cstdint>
#include <vector>

#include "data/tokens/token_dataset.h"
#include "util/random.h"

namespace zt::testing {

inline int32_t toy_token(int64_t sample, int64_t t, int64_t vocab) {
    int64_t x = static_cast<int64_t>(uniform01(11, static_cast<uint64_t>(sample), 0) * vocab);
    for (int64_t i = 0; i < t; ++i) x = (5 * x + 3) % vocab;
    return static_cast<int32_t>(x);
}

// in, tg: (micro, T) inputs and next-token targets of rank `rank`'s micro-batch m of `step`.
inline void toy_micro_batch(std::vector<int32_t>& in, std::vector<int32_t>& tg, int64_t step,
                            int64_t m, int rank, int64_t micro, int64_t accum, int ranks,
                            int64_t T, int64_t vocab) {
    in.resize(static_cast<size_t>(micro * T));
    tg.resize(in.size());
    for (int64_t j = 0; j < micro; ++j) {
        const int64_t k = global_sample_index(step, m, rank, micro, accum, ranks, j);
        for (int64_t t = 0; t < T; ++t) {
            in[static_cast<size_t>(j * T + t)] = toy_token(k, t, vocab);
            tg[static_cast<size_t>(j * T + t)] = toy_token(k, t + 1, vocab);
        }
    }
}

}  // namespace zt::testing
