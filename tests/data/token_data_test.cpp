// Token data (shared/DESIGN.md, Token data): token files, sample indexing and shuffling, the
// built-in corpus and its entropy figures, the byte-level tokenizer. Expected values come from the
// contract's formulas, recomputed here independently of the code under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "data/tokens/builtin_corpus.h"
#include "data/tokens/token_dataset.h"
#include "data/tokens/token_file.h"
#include "data/tokens/tokenize.h"
#include "util/error.h"
#include "util/random.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class TempDir {
  public:
    TempDir() {
        std::string tmpl = (fs::temp_directory_path() / "zt_data_test_XXXXXX").string();
        ZT_ASSERT(::mkdtemp(tmpl.data()) != nullptr);
        path_ = tmpl;
    }
    ~TempDir() { fs::remove_all(path_); }
    std::string file(const std::string& name) const { return (path_ / name).string(); }

  private:
    fs::path path_;
};

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// Little-endian bytes of ids, built by hand (not by TokenFileWriter).
std::vector<unsigned char> le_bytes(const std::vector<uint32_t>& ids, int width) {
    std::vector<unsigned char> b;
    for (uint32_t v : ids)
        for (int i = 0; i < width; ++i) b.push_back(static_cast<unsigned char>(v >> (8 * i)));
    return b;
}

std::string error_message(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

uint32_t pattern(int64_t t, int64_t vocab) { return static_cast<uint32_t>((t * 7 + 3) % vocab); }

// -------------------------------------------------------------------------------------------------
// Token files

TEST(DataTokenFile, ReadsLittleEndianUint16) {
    TempDir dir;
    std::vector<uint32_t> ids = {0, 1, 255, 256, 0x1234, 65535, 7};
    write_bytes(dir.file("a.bin"), le_bytes(ids, 2));
    MappedTokenFile f(dir.file("a.bin"), TokenDtype::kUint16);
    ASSERT_EQ(f.size(), static_cast<int64_t>(ids.size()));
    std::vector<int32_t> out(ids.size());
    f.read(0, f.size(), out.data());
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(static_cast<uint32_t>(out[i]), ids[i]) << i;
    f.read(3, 2, out.data());
    EXPECT_EQ(out[0], 256);
    EXPECT_EQ(out[1], 0x1234);
}

TEST(DataTokenFile, ReadsLittleEndianUint32) {
    TempDir dir;
    std::vector<uint32_t> ids = {0, 65536, 0x01020304, 100000, 0xFFFFFFFFu};
    write_bytes(dir.file("a.bin"), le_bytes(ids, 4));
    MappedTokenFile f(dir.file("a.bin"), TokenDtype::kUint32);
    ASSERT_EQ(f.size(), 5);
    std::vector<int32_t> out(5);
    f.read(0, 5, out.data());
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(static_cast<uint32_t>(out[i]), ids[i]) << i;
    // The same file read as uint16 is twice as long, low half first.
    MappedTokenFile g(dir.file("a.bin"), TokenDtype::kUint16);
    ASSERT_EQ(g.size(), 10);
    g.read(4, 2, out.data());
    EXPECT_EQ(out[0], 0x0304);
    EXPECT_EQ(out[1], 0x0102);
}

TEST(DataTokenFile, WriterRoundTripsBothDtypes) {
    TempDir dir;
    std::vector<uint32_t> ids = {5, 0, 65535, 300};
    write_token_file(dir.file("16.bin"), std::span<const uint32_t>(ids), TokenDtype::kUint16);
    write_token_file(dir.file("32.bin"), std::span<const uint32_t>(ids), TokenDtype::kUint32);
    EXPECT_EQ(fs::file_size(dir.file("16.bin")), 8u);
    EXPECT_EQ(fs::file_size(dir.file("32.bin")), 16u);
    EXPECT_FALSE(fs::exists(dir.file("16.bin.tmp")));
    std::ifstream f(dir.file("32.bin"), std::ios::binary);
    std::vector<unsigned char> raw((std::istreambuf_iterator<char>(f)), {});
    EXPECT_EQ(raw, le_bytes(ids, 4));
    MappedTokenFile m(dir.file("16.bin"), TokenDtype::kUint16);
    std::vector<int32_t> out(4);
    m.read(0, 4, out.data());
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(static_cast<uint32_t>(out[i]), ids[i]);
    // An id that does not fit uint16 is refused, and nothing is left behind.
    std::vector<uint32_t> big = {1, 70000};
    EXPECT_THROW(
        write_token_file(dir.file("bad.bin"), std::span<const uint32_t>(big), TokenDtype::kUint16),
        Error);
    EXPECT_FALSE(fs::exists(dir.file("bad.bin")));
    EXPECT_FALSE(fs::exists(dir.file("bad.bin.tmp")));
}

TEST(DataTokenFile, MissingFileNamesPath) {
    TempDir dir;
    std::string path = dir.file("nope.bin");
    std::string msg = error_message([&] { MappedTokenFile f(path, TokenDtype::kUint16); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(DataTokenFile, SizeNotAMultipleOfDtype) {
    TempDir dir;
    write_bytes(dir.file("odd.bin"), {1, 2, 3, 4, 5, 6});  // 6 bytes: 3 uint16, 1.5 uint32
    EXPECT_NO_THROW(MappedTokenFile(dir.file("odd.bin"), TokenDtype::kUint16));
    std::string msg =
        error_message([&] { MappedTokenFile f(dir.file("odd.bin"), TokenDtype::kUint32); });
    EXPECT_NE(msg.find("not a multiple of 4"), std::string::npos) << msg;
    write_bytes(dir.file("odd2.bin"), {1, 2, 3});
    EXPECT_THROW(MappedTokenFile(dir.file("odd2.bin"), TokenDtype::kUint16), Error);
}

TEST(DataTokenFile, EmptyFile) {
    TempDir dir;
    write_bytes(dir.file("empty.bin"), {});
    std::string msg =
        error_message([&] { MappedTokenFile f(dir.file("empty.bin"), TokenDtype::kUint16); });
    EXPECT_NE(msg.find("empty"), std::string::npos) << msg;
}

TEST(DataTokenFile, ParsesDtypeNames) {
    EXPECT_EQ(parse_token_dtype("uint16"), TokenDtype::kUint16);
    EXPECT_EQ(parse_token_dtype("uint32"), TokenDtype::kUint32);
    EXPECT_STREQ(token_dtype_name(TokenDtype::kUint32), "uint32");
    EXPECT_EQ(token_dtype_bytes(TokenDtype::kUint16), 2);
    std::string msg = error_message([] { parse_token_dtype("int16"); });
    EXPECT_NE(msg.find("int16"), std::string::npos) << msg;
}

// -------------------------------------------------------------------------------------------------
// Samples

TEST(DataDataset, SampleCountIsFloorOfNMinusOneOverT) {
    EXPECT_EQ(token_sample_count(23, 5), 4);  // 22 / 5
    EXPECT_EQ(token_sample_count(21, 5), 4);  // 20 / 5: the last target is token 20
    EXPECT_EQ(token_sample_count(20, 5), 3);  // 19 / 5
    EXPECT_EQ(token_sample_count(6, 5), 1);
    EXPECT_EQ(token_sample_count(5, 5), 0);
    EXPECT_EQ(token_sample_count(0, 5), 0);
}

// Inputs and targets of every sample, read from a file written here, for both dtypes and with
// wraparound past the last sample.
TEST(DataDataset, InputsAndTargetsOfSampleFromFile) {
    for (TokenDtype dtype : {TokenDtype::kUint16, TokenDtype::kUint32}) {
        TempDir dir;
        const int64_t n = 23, T = 5, vocab = dtype == TokenDtype::kUint16 ? 50 : 100003;
        std::vector<uint32_t> ids(n);
        for (int64_t t = 0; t < n; ++t)
            ids[t] = dtype == TokenDtype::kUint16 ? pattern(t, vocab) : 65530 + pattern(t, 1000);
        write_bytes(dir.file("t.bin"), le_bytes(ids, static_cast<int>(token_dtype_bytes(dtype))));
        MappedTokenFile f(dir.file("t.bin"), dtype);
        TokenDataset ds(f, {.seq_len = T, .vocab_size = vocab});
        const int64_t S = (n - 1) / T;
        ASSERT_EQ(ds.num_samples(), S);
        std::vector<int32_t> in(T), tg(T);
        for (int64_t k = 0; k < 3 * S + 2; ++k) {
            const int64_t i = k % S;
            EXPECT_EQ(ds.sample_index(k), i);
            ds.get(k, in.data(), tg.data());
            for (int64_t j = 0; j < T; ++j) {
                EXPECT_EQ(static_cast<uint32_t>(in[j]), ids[i * T + j]) << "k " << k << " j " << j;
                EXPECT_EQ(static_cast<uint32_t>(tg[j]), ids[i * T + j + 1])
                    << "k " << k << " j " << j;
            }
        }
    }
}

TEST(DataDataset, TooFewTokensForOneSample) {
    InMemoryTokens exact(std::vector<uint32_t>{1, 2, 3, 4, 5, 6});  // T + 1 tokens: one sample
    TokenDataset ds(exact, {.seq_len = 5, .vocab_size = 10});
    EXPECT_EQ(ds.num_samples(), 1);
    InMemoryTokens short_src(std::vector<uint32_t>{1, 2, 3, 4, 5}, "short.bin");
    std::string msg =
        error_message([&] { TokenDataset d(short_src, {.seq_len = 5, .vocab_size = 10}); });
    EXPECT_NE(msg.find("short.bin"), std::string::npos) << msg;
    EXPECT_NE(msg.find("at least 6 tokens"), std::string::npos) << msg;
}

// An id outside the vocabulary is found when its sample is read, and the error names it.
TEST(DataDataset, IdOutsideVocabularyNamesIdPositionAndVocab) {
    TempDir dir;
    const int64_t T = 4, vocab = 16;
    std::vector<uint32_t> ids(4 * T + 1);
    for (size_t t = 0; t < ids.size(); ++t) ids[t] = pattern(static_cast<int64_t>(t), vocab);
    ids[2 * T + 3] = 16;       // in sample 2's inputs and targets
    ids[4 * T] = 0xFFFFFFFFu;  // sample 3's last target
    write_bytes(dir.file("v.bin"), le_bytes(ids, 4));
    MappedTokenFile f(dir.file("v.bin"), TokenDtype::kUint32);
    TokenDataset ds(f, {.seq_len = T, .vocab_size = vocab});
    std::vector<int32_t> in(T), tg(T);
    EXPECT_NO_THROW(ds.get(0, in.data(), tg.data()));
    EXPECT_NO_THROW(ds.get(1, in.data(), tg.data()));
    std::string msg = error_message([&] { ds.get(2, in.data(), tg.data()); });
    EXPECT_NE(msg.find("token id 16 at position 11"), std::string::npos) << msg;
    EXPECT_NE(msg.find("vocab_size 16"), std::string::npos) << msg;
    msg = error_message([&] { ds.get(3, in.data(), tg.data()); });
    EXPECT_NE(msg.find("token id 4294967295 at position 16"), std::string::npos) << msg;
    // The same ids are fine under a larger vocabulary, except the huge one.
    TokenDataset wide(f, {.seq_len = T, .vocab_size = 17});
    EXPECT_NO_THROW(wide.get(2, in.data(), tg.data()));
}

// The Fisher-Yates shuffle the contract names, written out here.
std::vector<int64_t> reference_permutation(int64_t S, uint64_t seed, int64_t epoch) {
    std::vector<int64_t> p(S);
    for (int64_t i = 0; i < S; ++i) p[i] = i;
    Rng rng(splitmix64(seed ^ splitmix64(static_cast<uint64_t>(epoch))));
    for (int64_t i = S - 1; i > 0; --i) std::swap(p[i], p[rng.below(static_cast<uint64_t>(i + 1))]);
    return p;
}

TEST(DataDataset, ShuffleIsAPermutationPerEpochSeededBySeedAndEpoch) {
    const int64_t T = 3, S = 37;
    std::vector<uint32_t> ids(S * T + 1);
    for (size_t t = 0; t < ids.size(); ++t) ids[t] = static_cast<uint32_t>(t % 50);
    InMemoryTokens src(ids);
    TokenDataset ds(src, {.seq_len = T, .vocab_size = 50, .shuffle = true, .seed = 42});
    std::vector<std::vector<int64_t>> orders;
    // Epochs visited out of order (3, 0, 2, 1) must give the same orders as in order.
    for (int64_t e : {3, 0, 2, 1}) {
        std::vector<int64_t> order;
        for (int64_t r = 0; r < S; ++r) order.push_back(ds.sample_index(e * S + r));
        EXPECT_EQ(order, reference_permutation(S, 42, e)) << "epoch " << e;
        EXPECT_EQ(order, epoch_permutation(S, 42, e));
        std::vector<int64_t> sorted = order;
        std::sort(sorted.begin(), sorted.end());
        for (int64_t i = 0; i < S; ++i)
            ASSERT_EQ(sorted[i], i) << "epoch " << e << " not a permutation";
        orders.push_back(order);
    }
    for (size_t a = 0; a < orders.size(); ++a)
        for (size_t b = a + 1; b < orders.size(); ++b) EXPECT_NE(orders[a], orders[b]);
    // Identity in no epoch (a shuffle that did nothing would pass the permutation check).
    std::vector<int64_t> identity(S);
    for (int64_t i = 0; i < S; ++i) identity[i] = i;
    for (const auto& o : orders) EXPECT_NE(o, identity);
    // Another dataset object with the same seed: same order; another seed: a different one.
    TokenDataset same(src, {.seq_len = T, .vocab_size = 50, .shuffle = true, .seed = 42});
    TokenDataset other(src, {.seq_len = T, .vocab_size = 50, .shuffle = true, .seed = 43});
    std::vector<int64_t> a, b;
    for (int64_t r = 0; r < S; ++r) a.push_back(same.sample_index(2 * S + r));
    for (int64_t r = 0; r < S; ++r) b.push_back(other.sample_index(2 * S + r));
    EXPECT_EQ(a, orders[2]);
    EXPECT_NE(b, orders[2]);
    // get() reads the permuted sample.
    std::vector<int32_t> in(T), tg(T);
    ds.get(S + 5, in.data(), tg.data());
    const int64_t i = reference_permutation(S, 42, 1)[5];
    EXPECT_EQ(static_cast<uint32_t>(in[0]), ids[i * T]);
    EXPECT_EQ(static_cast<uint32_t>(tg[T - 1]), ids[i * T + T]);
}

TEST(DataDataset, ShuffledReadsAreThreadSafe) {
    const int64_t T = 2, S = 101;
    std::vector<uint32_t> ids(S * T + 1, 1);
    InMemoryTokens src(ids);
    TokenDataset ds(src, {.seq_len = T, .vocab_size = 2, .shuffle = true, .seed = 7});
    std::vector<std::vector<int64_t>> got(4);
    std::vector<std::thread> threads;
    for (int r = 0; r < 4; ++r)
        threads.emplace_back([&, r] {
            for (int64_t k = 0; k < 5 * S; ++k) got[r].push_back(ds.sample_index(k));
        });
    for (auto& t : threads) t.join();
    for (int r = 0; r < 4; ++r)
        for (int64_t k = 0; k < 5 * S; ++k)
            ASSERT_EQ(got[r][k], reference_permutation(S, 7, k / S)[k % S]) << r << " " << k;
}

// A sample range [first, first + count): training on the head, evaluation on the held-out tail.
TEST(DataDataset, SampleRangeHoldsOutATail) {
    const int64_t T = 4, n = 41;  // S = 10
    std::vector<uint32_t> ids(n);
    for (int64_t t = 0; t < n; ++t) ids[t] = pattern(t, 64);
    InMemoryTokens src(ids);
    TokenDataset train(src, {.seq_len = T, .vocab_size = 64, .sample_count = 7});
    TokenDataset eval(src, {.seq_len = T, .vocab_size = 64, .first_sample = 7});
    TokenDataset train_shuffled(
        src, {.seq_len = T, .vocab_size = 64, .shuffle = true, .seed = 3, .sample_count = 7});
    EXPECT_EQ(train.num_samples(), 7);
    EXPECT_EQ(eval.num_samples(), 3);
    for (int64_t k = 0; k < 30; ++k) {
        EXPECT_EQ(train.sample_index(k), k % 7);
        EXPECT_EQ(eval.sample_index(k), 7 + k % 3);
        EXPECT_EQ(train_shuffled.sample_index(k), reference_permutation(7, 3, k / 7)[k % 7]);
    }
    std::vector<int32_t> in(T), tg(T);
    eval.get(4, in.data(), tg.data());  // sample 8
    EXPECT_EQ(static_cast<uint32_t>(in[0]), ids[32]);
    EXPECT_EQ(static_cast<uint32_t>(tg[T - 1]), ids[36]);
    EXPECT_THROW(TokenDataset(src, {.seq_len = T, .vocab_size = 64, .first_sample = 10}), Error);
    EXPECT_THROW(
        TokenDataset(src, {.seq_len = T, .vocab_size = 64, .first_sample = 5, .sample_count = 6}),
        Error);
    EXPECT_THROW(TokenDataset(src, {.seq_len = T, .vocab_size = 64, .sample_count = 0}), Error);
}

// A step's samples are split in order of (micro-step, dp rank); dp ranks x accumulation G read what
// one rank with accumulation dp x G reads.
TEST(DataGlobalSampleIndex, SplitsAStepByMicroStepThenRank) {
    EXPECT_EQ(global_sample_index(1, 2, 1, 3, 4, 2, 2), 1 * 24 + (2 * 2 + 1) * 3 + 2);
    const int64_t micro = 3, accum = 2, dp = 3;
    for (int64_t step = 0; step < 3; ++step) {
        std::vector<int64_t> seen, single;
        for (int64_t m = 0; m < accum; ++m)
            for (int64_t r = 0; r < dp; ++r)
                for (int64_t j = 0; j < micro; ++j)
                    seen.push_back(global_sample_index(step, m, r, micro, accum, dp, j));
        for (int64_t m = 0; m < accum * dp; ++m)
            for (int64_t j = 0; j < micro; ++j)
                single.push_back(global_sample_index(step, m, 0, micro, accum * dp, 1, j));
        EXPECT_EQ(seen, single);
        for (size_t q = 0; q < seen.size(); ++q)
            EXPECT_EQ(seen[q], step * micro * accum * dp + static_cast<int64_t>(q));
    }
}

// -------------------------------------------------------------------------------------------------
// The built-in corpus

BuiltinCorpusOptions small_corpus() {
    BuiltinCorpusOptions o;
    o.alphabet = 16;
    o.period = 16;
    o.n_tokens = 20000 + 5;  // a partial last block
    o.successors = 3;
    o.seed = 99;
    return o;
}

TEST(Corpus, SameSeedSameTokensOtherSeedDiffers) {
    BuiltinCorpusOptions o = small_corpus();
    std::vector<uint16_t> a = generate_builtin_corpus(o, nullptr);
    std::vector<uint16_t> b = generate_builtin_corpus(o, nullptr);
    EXPECT_EQ(a, b);
    ASSERT_EQ(static_cast<int64_t>(a.size()), o.n_tokens);
    for (uint16_t x : a) ASSERT_LT(x, o.alphabet);
    o.seed = 100;
    std::vector<uint16_t> c = generate_builtin_corpus(o, nullptr);
    EXPECT_NE(a, c);
    int64_t diff = 0;
    for (size_t t = 0; t < a.size(); ++t) diff += a[t] != c[t];
    EXPECT_GT(diff, static_cast<int64_t>(a.size()) / 2);  // not just a few tokens
}

TEST(Corpus, SecondHalfOfEveryBlockCopiesTheFirst) {
    BuiltinCorpusOptions o = small_corpus();
    std::vector<uint16_t> x = generate_builtin_corpus(o, nullptr);
    const int64_t P = o.period, n = o.n_tokens;
    int64_t checked = 0;
    for (int64_t t = 0; t < n; ++t)
        if (t % P >= P / 2) {
            ASSERT_EQ(x[t], x[t - P / 2]) << t;
            ++checked;
        }
    EXPECT_GE(checked, (n / P) * (P / 2));
    // The first half is not itself periodic (so the copy is information, not a pattern).
    int64_t same = 0;
    for (int64_t t = P; t < n; ++t) same += (t % P < P / 2) && x[t] == x[t - P];
    EXPECT_LT(same, n / 4);
}

TEST(Corpus, MarkovHalfFollowsTheChain) {
    BuiltinCorpusOptions o = small_corpus();
    const MarkovChain c = make_builtin_chain(o);
    const int64_t A = o.alphabet, k = o.successors, P = o.period;
    ASSERT_EQ(c.alphabet, A);
    ASSERT_EQ(c.successors, k);
    for (int64_t s = 0; s < A; ++s) {
        double sum = 0, h = 0;
        std::set<uint16_t> distinct;
        for (int64_t j = 0; j < k; ++j) {
            double p = c.prob[s * k + j];
            EXPECT_GT(p, 0);
            sum += p;
            h -= p * std::log(p);
            distinct.insert(c.next[s * k + j]);
            EXPECT_LT(c.next[s * k + j], A);
        }
        EXPECT_NEAR(sum, 1.0, 1e-12);
        EXPECT_NEAR(c.entropy[s], h, 1e-12);
        EXPECT_EQ(static_cast<int64_t>(distinct.size()), k) << "successors of " << s << " repeat";
    }
    // Every Markov transition is to a successor, at about the chain's probability.
    std::vector<uint16_t> x = generate_builtin_corpus(o, nullptr);
    std::map<std::pair<int, int>, int64_t> counts;
    std::vector<int64_t> from(A, 0);
    for (int64_t t = 0; t < o.n_tokens; ++t) {
        const int64_t pos = t % P;
        if (pos == 0 || pos >= P / 2) continue;
        ++counts[{x[t - 1], x[t]}];
        ++from[x[t - 1]];
    }
    for (int64_t s = 0; s < A; ++s) {
        int64_t covered = 0;
        for (int64_t j = 0; j < k; ++j) {
            const int64_t cnt = counts[{static_cast<int>(s), c.next[s * k + j]}];
            covered += cnt;
            const double p = c.prob[s * k + j], m = static_cast<double>(from[s]);
            EXPECT_NEAR(cnt / m, p, 5 * std::sqrt(p * (1 - p) / m) + 1e-9) << s << " -> " << j;
        }
        EXPECT_EQ(covered, from[s]) << "a transition from " << s << " left the chain";
    }
}

// H recomputed here: ((P/2 - 1) * mean Markov-state entropy + log A) / P, the mean taken over the
// Markov targets of all S samples with the chain's per-state entropies.
double entropy_rate_from_formula(const std::vector<uint16_t>& x, const MarkovChain& c, int64_t P) {
    const int64_t S = (static_cast<int64_t>(x.size()) - 1) / P;
    double sum = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < S; ++i)
        for (int64_t pos = 1; pos < P / 2; ++pos) {
            sum += c.entropy[x[i * P + pos - 1]];
            ++count;
        }
    EXPECT_EQ(count, S * (P / 2 - 1));
    const double mean_markov = sum / static_cast<double>(count);
    return ((P / 2 - 1) * mean_markov + std::log(static_cast<double>(c.alphabet))) / P;
}

// Empirical conditional entropies from a map of counts over the pairs (x_t, x_{t+1}), t < S*P.
void bigram_and_unigram(const std::vector<uint16_t>& x, int64_t P, double* bigram,
                        double* unigram) {
    const int64_t N = (static_cast<int64_t>(x.size()) - 1) / P * P;
    std::map<std::pair<int, int>, double> pair_count;
    std::map<int, double> prev_count, next_count;
    for (int64_t t = 0; t < N; ++t) {
        pair_count[{x[t], x[t + 1]}] += 1;
        prev_count[x[t]] += 1;
        next_count[x[t + 1]] += 1;
    }
    double hb = 0, hu = 0;
    for (const auto& [ab, c] : pair_count) hb -= c / N * std::log(c / prev_count[ab.first]);
    for (const auto& [b, c] : next_count) hu -= c / N * std::log(c / N);
    *bigram = hb;
    *unigram = hu;
}

void expect_info_matches(const BuiltinCorpusOptions& o) {
    CorpusInfo info;
    std::vector<uint16_t> x = generate_builtin_corpus(o, &info);
    const MarkovChain c = make_builtin_chain(o);
    EXPECT_EQ(info.num_samples, (o.n_tokens - 1) / o.period);
    const double h = entropy_rate_from_formula(x, c, o.period);
    EXPECT_NEAR(info.entropy_rate, h, 1e-9 * h);
    double hb = 0, hu = 0;
    bigram_and_unigram(x, o.period, &hb, &hu);
    EXPECT_NEAR(info.bigram_bound, hb, 1e-9 * hb);
    EXPECT_NEAR(info.unigram_entropy, hu, 1e-9 * hu);
    // The ordering that makes the corpus a test of attention: H < bigram < unigram <= log A.
    EXPECT_GT(info.bigram_bound, info.entropy_rate + 0.2);
    EXPECT_LT(info.bigram_bound, info.unigram_entropy);
    EXPECT_LE(info.unigram_entropy, std::log(static_cast<double>(o.alphabet)) + 1e-12);
}

TEST(Corpus, EntropyRateAndBoundsMatchIndependentComputation) {
    expect_info_matches(small_corpus());
    BuiltinCorpusOptions o = small_corpus();
    o.period = 10;  // P/2 odd
    o.successors = 2;
    expect_info_matches(o);
}

// The default example of docs/data.md; prints the figures the doc quotes.
TEST(Corpus, DefaultExampleFigures) {
    BuiltinCorpusOptions o;  // V 256, alphabet 64, P 64, k 4, seed 1234, 1M tokens
    ASSERT_EQ(o.vocab_size, 256);
    ASSERT_EQ(o.alphabet, 64);
    ASSERT_EQ(o.period, 64);
    ASSERT_EQ(o.successors, 4);
    ASSERT_EQ(o.seed, 1234u);
    ASSERT_EQ(o.n_tokens, 1000000);
    expect_info_matches(o);
    CorpusInfo info;
    generate_builtin_corpus(o, &info);
    std::printf(
        "default builtin corpus: S %lld, entropy_rate %.6f, bigram_bound %.6f, "
        "unigram_entropy %.6f, log(alphabet) %.6f nats\n",
        static_cast<long long>(info.num_samples), info.entropy_rate, info.bigram_bound,
        info.unigram_entropy, std::log(64.0));
}

TEST(Corpus, RefusesBadOptions) {
    auto with = [](auto change) {
        BuiltinCorpusOptions o = small_corpus();
        change(o);
        return o;
    };
    EXPECT_THROW(generate_builtin_corpus(with([](auto& o) { o.period = 15; }), nullptr), Error);
    EXPECT_THROW(generate_builtin_corpus(with([](auto& o) { o.successors = 17; }), nullptr), Error);
    EXPECT_THROW(generate_builtin_corpus(with([](auto& o) { o.successors = 0; }), nullptr), Error);
    EXPECT_THROW(generate_builtin_corpus(with([](auto& o) { o.alphabet = 300; }), nullptr), Error);
    EXPECT_THROW(generate_builtin_corpus(with([](auto& o) { o.n_tokens = 16; }), nullptr), Error);
    EXPECT_NO_THROW(generate_builtin_corpus(with([](auto& o) { o.n_tokens = 17; }), nullptr));
}

// Through the dataset with T = P, sample i's inputs are block i, and its copied half is
// predictable.
TEST(Corpus, BlocksAreTrainingSamples) {
    BuiltinCorpusOptions o = small_corpus();
    std::vector<uint16_t> x = generate_builtin_corpus(o, nullptr);
    InMemoryTokens src(x, "builtin corpus");
    const int64_t P = o.period;
    TokenDataset ds(src, {.seq_len = P, .vocab_size = o.vocab_size});
    EXPECT_EQ(ds.num_samples(), (o.n_tokens - 1) / P);
    std::vector<int32_t> in(P), tg(P);
    ds.get(17, in.data(), tg.data());
    for (int64_t j = 0; j < P; ++j) EXPECT_EQ(in[j], x[17 * P + j]);
    // The target at place P/2 - 1 + j is the input at place j, for j < P/2.
    for (int64_t j = 0; j < P / 2; ++j) EXPECT_EQ(tg[P / 2 - 1 + j], in[j]);
}

// -------------------------------------------------------------------------------------------------
// The byte-level tokenizer

TEST(Tokenize, RoundTripsEveryByteValue) {
    TempDir dir;
    std::vector<unsigned char> bytes;
    for (int b = 0; b < 256; ++b) bytes.push_back(static_cast<unsigned char>(b));
    for (char ch : std::string("hello, zerotrain\n\r\0x", 20))
        bytes.push_back(static_cast<unsigned char>(ch));
    write_bytes(dir.file("in.txt"), bytes);
    for (TokenDtype dtype : {TokenDtype::kUint16, TokenDtype::kUint32}) {
        const std::string out = dir.file(std::string("out_") + token_dtype_name(dtype) + ".bin");
        EXPECT_EQ(tokenize_file(dir.file("in.txt"), out, dtype),
                  static_cast<int64_t>(bytes.size()));
        EXPECT_FALSE(fs::exists(out + ".tmp"));
        EXPECT_EQ(fs::file_size(out), bytes.size() * token_dtype_bytes(dtype));
        MappedTokenFile f(out, dtype);
        ASSERT_EQ(f.size(), static_cast<int64_t>(bytes.size()));
        std::vector<int32_t> ids(bytes.size());
        f.read_checked(0, f.size(), kByteVocabSize, ids.data());
        for (size_t i = 0; i < bytes.size(); ++i) ASSERT_EQ(ids[i], bytes[i]) << i;
    }
}

TEST(Tokenize, ReplacesAnExistingOutput) {
    TempDir dir;
    write_bytes(dir.file("in.txt"), {'a', 'b'});
    write_bytes(dir.file("out.bin"), std::vector<unsigned char>(100, 7));
    tokenize_file(dir.file("in.txt"), dir.file("out.bin"), TokenDtype::kUint16);
    std::ifstream f(dir.file("out.bin"), std::ios::binary);
    std::vector<unsigned char> raw((std::istreambuf_iterator<char>(f)), {});
    EXPECT_EQ(raw, (std::vector<unsigned char>{'a', 0, 'b', 0}));
}

TEST(Tokenize, ErrorsNamePaths) {
    TempDir dir;
    std::string missing = dir.file("missing.txt");
    std::string msg =
        error_message([&] { tokenize_file(missing, dir.file("o.bin"), TokenDtype::kUint16); });
    EXPECT_NE(msg.find(missing), std::string::npos) << msg;
    EXPECT_FALSE(fs::exists(dir.file("o.bin")));
    EXPECT_FALSE(fs::exists(dir.file("o.bin.tmp")));
    write_bytes(dir.file("in.txt"), {'x'});
    std::string unwritable = dir.file("no_such_dir/o.bin");
    msg =
        error_message([&] { tokenize_file(dir.file("in.txt"), unwritable, TokenDtype::kUint16); });
    EXPECT_NE(msg.find(unwritable), std::string::npos) << msg;
}

}  // namespace
}  // namespace zt
