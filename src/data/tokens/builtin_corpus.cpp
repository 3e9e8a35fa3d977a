#include "data/tokens/builtin_corpus.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/error.h"
#include "util/random.h"

namespace zt {

namespace {

// Stream tags, so that the chain and the token draws use independent generators.
constexpr uint64_t kChainStream = 0x636861696eull;  // "chain"
constexpr uint64_t kTokenStream = 0x746f6b656eull;  // "token"
constexpr int64_t kMaxAlphabet = 1024;              // bigram table: 8 MiB of int64 counts

void check_options(const BuiltinCorpusOptions& o) {
    ZT_CHECK(o.alphabet >= 2 && o.alphabet <= o.vocab_size,
             "builtin corpus: alphabet must be in [2, ", "vocab_size ", o.vocab_size, "], got ",
             o.alphabet);
    ZT_CHECK(o.alphabet <= kMaxAlphabet, "builtin corpus: alphabet must be <= ", kMaxAlphabet,
             " (bigram counts are a dense A x A table), got ", o.alphabet);
    ZT_CHECK(o.vocab_size <= 65536,
             "builtin corpus: vocab_size must be <= 65536 (uint16 ids), got ", o.vocab_size);
    ZT_CHECK(o.successors >= 1 && o.successors <= o.alphabet,
             "builtin corpus: successors must be in "
             "[1, alphabet ",
             o.alphabet, "], got ", o.successors);
    ZT_CHECK(o.period >= 2 && o.period % 2 == 0,
             "builtin corpus: period (the model's seq_len) must "
             "be even and >= 2, got ",
             o.period);
    ZT_CHECK(o.n_tokens >= o.period + 1,
             "builtin corpus: n_tokens must be at least period + 1 = ", o.period + 1,
             " (one training sample), got ", o.n_tokens);
}

// -sum_x c(x)/N log(c(x)/N) over the nonzero counts of one row, times N: sum c log(N/c).
double count_entropy_sum(const int64_t* counts, int64_t n, int64_t total) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i)
        if (counts[i] > 0)
            s += static_cast<double>(counts[i]) *
                 std::log(static_cast<double>(total) / static_cast<double>(counts[i]));
    return s;
}

void compute_info(const std::vector<uint16_t>& x, const MarkovChain& chain, int64_t P,
                  CorpusInfo* info) {
    const int64_t A = chain.alphabet;
    const int64_t S = (static_cast<int64_t>(x.size()) - 1) / P;
    const int64_t pairs = S * P;
    const double log_a = std::log(static_cast<double>(A));
    std::vector<int64_t> bigram(static_cast<size_t>(A * A), 0), unigram(static_cast<size_t>(A), 0);
    std::vector<int64_t> row(static_cast<size_t>(A), 0);
    double h_sum = 0;
    for (int64_t t = 0; t < pairs; ++t) {
        const int64_t a = x[t], b = x[t + 1];
        const int64_t pos = (t + 1) % P;  // the target's place in its block
        if (pos == 0)
            h_sum += log_a;  // the next block's uniform first token
        else if (pos < P / 2)
            h_sum += chain.entropy[a];  // Markov half; the copied half adds 0
        ++bigram[a * A + b];
        ++unigram[b];
        ++row[a];
    }
    double bigram_sum = 0;
    for (int64_t a = 0; a < A; ++a) bigram_sum += count_entropy_sum(&bigram[a * A], A, row[a]);
    info->entropy_rate = h_sum / static_cast<double>(pairs);
    info->bigram_bound = bigram_sum / static_cast<double>(pairs);
    info->unigram_entropy =
        count_entropy_sum(unigram.data(), A, pairs) / static_cast<double>(pairs);
    info->num_samples = S;
}

}  // namespace

MarkovChain make_builtin_chain(const BuiltinCorpusOptions& options) {
    check_options(options);
    const int64_t A = options.alphabet, k = options.successors;
    MarkovChain c;
    c.alphabet = A;
    c.successors = k;
    c.next.resize(static_cast<size_t>(A * k));
    c.prob.resize(static_cast<size_t>(A * k));
    c.entropy.resize(static_cast<size_t>(A));
    Rng rng(splitmix64(options.seed ^ kChainStream));
    std::vector<uint16_t> symbols(static_cast<size_t>(A));
    for (int64_t s = 0; s < A; ++s) {
        // k distinct successors: the first k places of a partial Fisher-Yates shuffle.
        std::iota(symbols.begin(), symbols.end(), uint16_t{0});
        for (int64_t j = 0; j < k; ++j) {
            int64_t r = j + static_cast<int64_t>(rng.below(static_cast<uint64_t>(A - j)));
            std::swap(symbols[j], symbols[r]);
            c.next[s * k + j] = symbols[j];
        }
        // Dirichlet(1, ..., 1) probabilities: normalized exponential weights.
        double total = 0;
        for (int64_t j = 0; j < k; ++j) {
            double w = -std::log(1.0 - rng.uniform());  // 1 - u in (0, 1]: finite
            c.prob[s * k + j] = w;
            total += w;
        }
        double h = 0;
        for (int64_t j = 0; j < k; ++j) {
            double p = c.prob[s * k + j] / total;
            c.prob[s * k + j] = p;
            if (p > 0) h -= p * std::log(p);
        }
        c.entropy[s] = h;
    }
    return c;
}

std::vector<uint16_t> generate_builtin_corpus(const BuiltinCorpusOptions& options,
                                              CorpusInfo* info) {
    const MarkovChain chain = make_builtin_chain(options);
    const int64_t A = options.alphabet, k = options.successors, P = options.period;
    const int64_t half = P / 2;
    // Cumulative probabilities per state; the last is treated as 1 so rounding never falls off the
    // end.
    std::vector<double> cdf(chain.prob.size());
    for (int64_t s = 0; s < A; ++s) {
        double c = 0;
        for (int64_t j = 0; j < k; ++j) cdf[s * k + j] = (c += chain.prob[s * k + j]);
    }
    std::vector<uint16_t> x(static_cast<size_t>(options.n_tokens));
    Rng rng(splitmix64(options.seed ^ kTokenStream));
    for (int64_t t = 0; t < options.n_tokens; ++t) {
        const int64_t pos = t % P;
        if (pos == 0) {
            x[t] = static_cast<uint16_t>(rng.below(static_cast<uint64_t>(A)));
        } else if (pos < half) {
            const int64_t s = x[t - 1];
            const double u = rng.uniform();
            int64_t j = 0;
            while (j < k - 1 && u >= cdf[s * k + j]) ++j;
            x[t] = chain.next[s * k + j];
        } else {
            x[t] = x[t - half];
        }
    }
    if (info != nullptr) compute_info(x, chain, P, info);
    return x;
}

}  // namespace zt
