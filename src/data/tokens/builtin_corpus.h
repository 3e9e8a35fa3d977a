// The built-in corpus: synthetic tokens generated from a seed, with a known entropy rate and a part
// only attention can predict. P = period (set it to the model's seq_len), A = alphabet. The corpus
// is blocks of P tokens aligned at multiples of P, so block i is exactly the inputs of training
// sample i: x_0 is uniform over the A symbols, x_1 .. x_{P/2-1} follow a seeded first-order Markov
// chain with k successors per symbol, and the second half copies the first, x_{P/2+j} = x_j. See
// docs/data.md for the formulas of CorpusInfo. Only ids < A are used; V (vocab_size) is the model's
// vocabulary (A <= V <= 65536, A <= 1024).
#pragma once

#include <cstdint>
#include <vector>

namespace zt {

struct BuiltinCorpusOptions {
    int64_t vocab_size = 256;  // V
    int64_t alphabet = 64;     // A: the symbols used, ids [0, A)
    int64_t period = 64;       // P: block length, even; set it to the model's seq_len
    int64_t n_tokens = 1000000;
    int64_t successors = 4;  // k: symbols each state can move to, 1 <= k <= A
    uint64_t seed = 1234;
};

// The chain of the Markov half. Rows are states (the current symbol).
struct MarkovChain {
    int64_t alphabet = 0;         // A
    int64_t successors = 0;       // k
    std::vector<uint16_t> next;   // (A, k): the k distinct successors of each state
    std::vector<double> prob;     // (A, k): their probabilities (normalized -log(u) weights)
    std::vector<double> entropy;  // (A): entropy of each state's next-symbol distribution, nats
};

// Loss figures in nats per predicted token, over the (input, target) pairs of the S =
// floor((n-1)/P) training samples of seq_len P, i.e. tokens [0, S*P].
struct CorpusInfo {
    double entropy_rate = 0;     // H: the ideal predictor's expected loss (the floor of any model)
    double bigram_bound = 0;     // empirical H(X_{t+1} | X_t): the best loss of a bigram model
    double unigram_entropy = 0;  // empirical H(X_{t+1}): the best loss of a unigram model
    int64_t num_samples = 0;     // S
};

// The chain a corpus with these options uses; depends on (seed, alphabet, successors) only.
MarkovChain make_builtin_chain(const BuiltinCorpusOptions& options);

// n_tokens ids; the same options give the same ids. Fills *info when info is not null.
std::vector<uint16_t> generate_builtin_corpus(const BuiltinCorpusOptions& options,
                                              CorpusInfo* info);

}  // namespace zt
