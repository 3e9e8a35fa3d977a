// Training samples from a token source (shared/DESIGN.md, Token data). T = seq_len; a source of n
// tokens holds S = floor((n - 1) / T) samples; sample i is tokens [i*T, i*T + T]: inputs the first
// T, targets the last T. A dataset uses the range [first, first + count) of those S samples (S' =
// count), so the engine can hold out a tail for evaluation. Global sample k (k = 0, 1, 2, ... over
// the run) is range sample k mod S' in epoch e = k / S'. With shuffle on, epoch e visits the range
// in the order of epoch_permutation(S', seed, e); shuffle off, in order. See Note [Global sample
// index] for how a step's samples are split over micro-steps and data-parallel ranks. Leaves out:
// sharding a file across ranks (every rank maps the whole file and reads its own samples).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "data/tokens/token_file.h"

namespace zt {

// S = floor((n - 1) / T): the number of samples in a source of n tokens (0 when n <= T).
int64_t token_sample_count(int64_t n_tokens, int64_t seq_len);

// The order in which epoch `epoch` visits S samples: a Fisher-Yates shuffle of 0..S-1 driven by
// zt::Rng(splitmix64(seed ^ splitmix64(epoch))). Depends only on (S, seed, epoch).
std::vector<int64_t> epoch_permutation(int64_t num_samples, uint64_t seed, int64_t epoch);

// Note [Global sample index]
// A step consumes micro_batch x grad_accum x dp samples. They are split in order of (micro-step, dp
// rank): micro-step m of rank r in step s reads, for j in [0, micro_batch),
//     k = s * (micro_batch * grad_accum * dp) + (m * dp + r) * micro_batch + j.
// So the run with dp ranks and accumulation G reads the same samples as one rank with accumulation
// dp x G (the equivalence rule), and resuming at step s needs no data-loader state.
int64_t global_sample_index(int64_t step, int64_t micro_step, int64_t dp_rank, int64_t micro_batch,
                            int64_t grad_accum, int64_t dp, int64_t j);

struct TokenDatasetOptions {
    int64_t seq_len = 64;      // T
    int64_t vocab_size = 256;  // every id read must be < vocab_size
    bool shuffle = false;
    uint64_t seed = 0;  // the run's seed; with shuffle, epoch e uses (seed, e)
    int64_t first_sample =
        0;  // the range [first_sample, first_sample + sample_count) of the S samples
    int64_t sample_count = -1;  // -1: through the last sample
};

// Borrows the source, which must outlive the dataset. get() is thread-safe.
class TokenDataset {
  public:
    TokenDataset(const TokenSource& source, const TokenDatasetOptions& options);
    TokenDataset(const TokenDataset&) = delete;
    TokenDataset& operator=(const TokenDataset&) = delete;

    int64_t num_samples() const { return count_; }  // S'
    int64_t seq_len() const { return options_.seq_len; }
    // The sample of the source (0 <= i < S) that global sample k reads.
    int64_t sample_index(int64_t k) const;
    // inputs[0, T) = tokens [i*T, i*T + T), targets[0, T) = tokens [i*T + 1, i*T + T + 1) for
    // i = sample_index(k). An id >= vocab_size is an error naming the id and its position.
    void get(int64_t k, int32_t* inputs, int32_t* targets) const;

  private:
    std::shared_ptr<const std::vector<int64_t>> permutation(int64_t epoch) const;

    const TokenSource& source_;
    TokenDatasetOptions options_;
    int64_t count_ = 0;
    // The permutations of the last two epochs used (ranks may straddle an epoch boundary).
    mutable std::mutex mutex_;
    mutable std::vector<std::pair<int64_t, std::shared_ptr<const std::vector<int64_t>>>> cache_;
};

}  // namespace zt
