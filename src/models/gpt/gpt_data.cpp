// GPT's run data: token samples (DESIGN.md, "Token data") from the generated builtin corpus or a
// token file, with an evaluation set from data.eval_path or a held-out tail (eval_fraction).
#include <algorithm>
#include <optional>

#include "data/tokens/builtin_corpus.h"
#include "data/tokens/token_dataset.h"
#include "models/gpt/gpt_family.h"
#include "util/error.h"

namespace zt {

namespace {

class GptRunData final : public RunData {
public:
    GptRunData(const GptOptions& model, const GptDataOptions& dc, uint64_t seed);

    Batch train_batch(int64_t k0, int64_t count) override { return load(*train_, k0, count); }
    bool has_eval() const override { return eval_ != nullptr; }
    Batch eval_batch(int64_t k0, int64_t count) override { return load(*eval_, k0, count); }
    std::vector<std::string> notes() const override;

private:
    // The samples k0 .. k0 + count - 1 of ds, into inputs_ and targets_.
    Batch load(const TokenDataset& ds, int64_t k0, int64_t count) {
        const int64_t T = ds.seq_len();
        inputs_.resize(count * T);
        targets_.resize(count * T);
        for (int64_t j = 0; j < count; ++j) ds.get(k0 + j, &inputs_[j * T], &targets_[j * T]);
        return Batch{inputs_, targets_, count, T};
    }

    std::unique_ptr<TokenSource> train_source_, eval_source_;
    std::unique_ptr<TokenDataset> train_, eval_;
    std::optional<CorpusInfo> corpus_;
    std::vector<int32_t> inputs_, targets_;
};

GptRunData::GptRunData(const GptOptions& model, const GptDataOptions& dc, uint64_t seed) {
    TokenDatasetOptions to;
    to.seq_len = model.seq_len;
    to.vocab_size = model.vocab_size;
    to.shuffle = dc.shuffle;
    to.seed = seed;
    if (dc.type == "builtin") {
        BuiltinCorpusOptions bo;
        bo.vocab_size = model.vocab_size;
        bo.alphabet = std::min<int64_t>(64, model.vocab_size);
        bo.period = model.seq_len;
        bo.n_tokens = dc.builtin_tokens;
        bo.seed = dc.builtin_seed;
        CorpusInfo info;
        auto tokens = generate_builtin_corpus(bo, &info);
        corpus_ = info;
        train_source_ = std::make_unique<InMemoryTokens>(std::span<const uint16_t>(tokens),
                                                         "builtin corpus");
    } else {
        train_source_ = std::make_unique<MappedTokenFile>(dc.path, parse_token_dtype(dc.dtype),
                                                          "data.path");
        if (!dc.eval_path.empty())
            eval_source_ = std::make_unique<MappedTokenFile>(
                dc.eval_path, parse_token_dtype(dc.dtype), "data.eval_path");
    }
    const int64_t S = token_sample_count(train_source_->size(), to.seq_len);
    ZT_CHECK(S >= 1, "data: ", train_source_->name(), " holds ", train_source_->size(),
             " tokens, fewer than one sample of model.seq_len + 1 = ", to.seq_len + 1);
    int64_t held = 0;
    if (!eval_source_ && dc.eval_fraction > 0) {
        held = std::max<int64_t>(1, static_cast<int64_t>(dc.eval_fraction * static_cast<double>(S)));
        ZT_CHECK(held < S, "data.eval_fraction: ", dc.eval_fraction, " holds out all ", S,
                 " samples; lower it");
    }
    to.first_sample = 0;
    to.sample_count = S - held;
    train_ = std::make_unique<TokenDataset>(*train_source_, to);
    TokenDatasetOptions eo = to;
    eo.shuffle = false;
    if (eval_source_) {
        eo.sample_count = -1;
        eval_ = std::make_unique<TokenDataset>(*eval_source_, eo);
    } else if (held > 0) {
        eo.first_sample = S - held;
        eo.sample_count = held;
        eval_ = std::make_unique<TokenDataset>(*train_source_, eo);
    }
}

std::vector<std::string> GptRunData::notes() const {
    if (!corpus_) return {};
    return {str_cat("builtin corpus: entropy rate H = ", corpus_->entropy_rate,
                    " nats/token, bigram bound = ", corpus_->bigram_bound,
                    " nats/token (the best a model without attention can do)")};
}

}  // namespace

std::unique_ptr<RunData> GptFamily::open_data(const DataContext& ctx) const {
    return std::make_unique<GptRunData>(model_, data_, ctx.seed);
}

}  // namespace zt
