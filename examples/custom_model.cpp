// A user-defined model trained with zerotrain's Engine from C++: a small MLP language model that
// sees the current and previous token (a trigram-style predictor) on the built-in corpus.
// Build: it is built with the project (build/examples/custom_model); run it without arguments.
#include <cstdio>
#include <memory>
#include <vector>

#include "nn/layers.h"
#include "nn/model.h"
#include "optim/adamw.h"
#include "data/tokens/builtin_corpus.h"
#include "runtime/engine.h"

// ids (B, T) -> embed current and previous token, concatenate through a sum of two projections,
// GELU, project to the vocabulary; loss is mean cross-entropy.
class TwoTokenMlp : public zt::Model {
public:
    TwoTokenMlp(int64_t vocab, int64_t width)
        : emb_cur(register_module<zt::Embedding>("emb_cur", vocab, width)),
          emb_prev(register_module<zt::Embedding>("emb_prev", vocab, width)),
          hidden(register_module<zt::Linear>("hidden", zt::LinearOptions{width, 4 * width})),
          out(register_module<zt::Linear>("out", zt::LinearOptions{4 * width, vocab})) {}

    zt::Var loss(zt::Tape& tape, const zt::Batch& b) override {
        prev_.resize(b.inputs.size());
        for (int64_t i = 0; i < b.B * b.T; ++i)
            prev_[i] = (i % b.T == 0) ? 0 : b.inputs[i - 1];
        zt::Var x = zt::ops::add(tape, emb_cur.forward(tape, b.inputs), emb_prev.forward(tape, prev_));
        zt::Var h = zt::ops::gelu(tape, hidden.forward(tape, x));
        return zt::ops::cross_entropy(tape, out.forward(tape, h), b.targets);
    }

    zt::Embedding& emb_cur;
    zt::Embedding& emb_prev;
    zt::Linear& hidden;
    zt::Linear& out;

private:
    std::vector<int32_t> prev_;
};

int main() {
    const int64_t B = 16, T = 64, steps = 300;
    zt::BuiltinCorpusOptions co;
    co.n_tokens = 1 << 18;
    zt::CorpusInfo info;
    std::vector<uint16_t> corpus = zt::generate_builtin_corpus(co, &info);

    zt::MemoryPool pool;
    zt::EngineOptions eo;
    eo.optimizer = std::make_unique<zt::AdamW>(zt::AdamWOptions{});
    eo.lr = 1e-2;
    zt::Engine engine(pool, std::make_unique<TwoTokenMlp>(256, 32), std::move(eo));

    std::vector<int32_t> inputs(B * T), targets(B * T);
    double first_loss = 0, last_loss = 0;
    const int64_t samples = (static_cast<int64_t>(corpus.size()) - 1) / T;
    for (int64_t step = 0; step < steps; ++step) {
        for (int64_t j = 0; j < B; ++j) {
            int64_t s = (step * B + j) % samples;
            for (int64_t t = 0; t < T; ++t) {
                inputs[j * T + t] = corpus[s * T + t];
                targets[j * T + t] = corpus[s * T + t + 1];
            }
        }
        engine.forward_backward(zt::Batch{inputs, targets, B, T});
        zt::StepStats st = engine.step();
        if (step == 0) first_loss = st.loss;
        last_loss = st.loss;
        if ((step + 1) % 25 == 0)
            std::printf("step %3ld  loss %.4f  grad_norm %.3f\n", static_cast<long>(step + 1),
                        st.loss, st.grad_norm);
    }
    std::printf("loss %.4f -> %.4f; the corpus's bigram bound is %.4f nats (a model that sees two "
                "tokens can go a little below it)\n",
                first_loss, last_loss, info.bigram_bound);
    return last_loss < first_loss ? 0 : 1;
}
