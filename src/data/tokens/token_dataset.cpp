#include "data/tokens/token_dataset.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "util/error.h"
#include "util/random.h"

namespace zt {

int64_t token_sample_count(int64_t n_tokens, int64_t seq_len) {
    ZT_ASSERT(seq_len > 0);
    return n_tokens <= seq_len ? 0 : (n_tokens - 1) / seq_len;
}

std::vector<int64_t> epoch_permutation(int64_t num_samples, uint64_t seed, int64_t epoch) {
    ZT_ASSERT(num_samples >= 0 && epoch >= 0);
    std::vector<int64_t> perm(static_cast<size_t>(num_samples));
    std::iota(perm.begin(), perm.end(), int64_t{0});
    Rng rng(splitmix64(seed ^ splitmix64(static_cast<uint64_t>(epoch))));
    for (int64_t i = num_samples - 1; i > 0; --i) {
        int64_t j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i + 1)));
        std::swap(perm[i], perm[j]);
    }
    return perm;
}

int64_t global_sample_index(int64_t step, int64_t micro_step, int64_t dp_rank, int64_t micro_batch,
                            int64_t grad_accum, int64_t dp, int64_t j) {
    ZT_ASSERT(micro_step >= 0 && micro_step < grad_accum && dp_rank >= 0 && dp_rank < dp &&
              j >= 0 && j < micro_batch);
    return step * (micro_batch * grad_accum * dp) + (micro_step * dp + dp_rank) * micro_batch + j;
}

TokenDataset::TokenDataset(const TokenSource& source, const TokenDatasetOptions& options)
    : source_(source), options_(options) {
    const int64_t T = options.seq_len;
    ZT_CHECK(T > 0, "token data: seq_len must be positive, got ", T);
    ZT_CHECK(options.vocab_size > 0, "token data: vocab_size must be positive, got ",
             options.vocab_size);
    const int64_t n = source.size();
    const int64_t S = token_sample_count(n, T);
    ZT_CHECK(S >= 1, "token data ", source.name(), ": ", n,
             " tokens are too few for one sample of ", "seq_len ", T, " (needs at least ", T + 1,
             " tokens); use a larger file or a smaller seq_len");
    const int64_t first = options.first_sample;
    ZT_CHECK(first >= 0 && first < S, "token data ", source.name(), ": first sample ", first,
             " is outside the file's ", S, " samples");
    count_ = options.sample_count < 0 ? S - first : options.sample_count;
    ZT_CHECK(count_ >= 1 && first + count_ <= S, "token data ", source.name(), ": sample range [",
             first, ", ", first + count_, ") is outside the file's ", S, " samples (seq_len ", T,
             ")");
}

std::shared_ptr<const std::vector<int64_t>> TokenDataset::permutation(int64_t epoch) const {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        for (const auto& [e, perm] : cache_)
            if (e == epoch) return perm;
    }
    // Built outside the lock: two threads may both build it; they get the same values.
    auto perm = std::make_shared<const std::vector<int64_t>>(
        epoch_permutation(count_, options_.seed, epoch));
    std::lock_guard<std::mutex> lock(mutex_);
    if (cache_.size() >= 2) cache_.erase(cache_.begin());
    cache_.emplace_back(epoch, perm);
    return perm;
}

int64_t TokenDataset::sample_index(int64_t k) const {
    ZT_ASSERT(k >= 0, "global sample index ", k);
    const int64_t epoch = k / count_;
    const int64_t r = k % count_;
    const int64_t i = options_.shuffle ? (*permutation(epoch))[static_cast<size_t>(r)] : r;
    return options_.first_sample + i;
}

void TokenDataset::get(int64_t k, int32_t* inputs, int32_t* targets) const {
    const int64_t T = options_.seq_len;
    const int64_t start = sample_index(k) * T;
    source_.read_checked(start, T, options_.vocab_size, inputs);
    std::copy(inputs + 1, inputs + T, targets);
    source_.read_checked(start + T, 1, options_.vocab_size, targets + T - 1);
}

}  // namespace zt
