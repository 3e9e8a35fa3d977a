// The README's default example (examples/gpt-tiny.json) learns what only attention can learn: its
// final losses end below the built-in corpus's bigram bound and within 0.3 nats of its entropy
// rate H (the acceptance figures), both computed here from the corpus generator.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/gpt/gpt_family.h"
#include "runtime/config.h"
#include "data/tokens/builtin_corpus.h"

namespace fs = std::filesystem;

TEST(DefaultExample, EndsBelowBigramBoundAndNearEntropyRate) {
    const std::string cfg_path = std::string(ZT_SOURCE_DIR) + "/examples/gpt-tiny.json";
    zt::TrainConfig cfg = zt::parse_config(zt::load_config_file(cfg_path)).config;
    zt::BuiltinCorpusOptions co;
    co.vocab_size = as_gpt(*cfg.model).options().vocab_size;
    co.alphabet = std::min<int64_t>(64, as_gpt(*cfg.model).options().vocab_size);
    co.period = as_gpt(*cfg.model).options().seq_len;
    co.n_tokens = as_gpt(*cfg.model).data().builtin_tokens;
    co.seed = as_gpt(*cfg.model).data().builtin_seed;
    zt::CorpusInfo info;
    zt::generate_builtin_corpus(co, &info);

    fs::path rd = fs::temp_directory_path() / ("zt_default_" + std::to_string(::getpid()));
    fs::remove_all(rd);
    std::string cmd = std::string(ZT_BINARY) + " train " + cfg_path + " --run-dir " + rd.string() +
                      " --quiet --threads 2 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    double last_loss = -1, last_eval = -1;
    std::ifstream f(rd / "metrics.jsonl");
    std::string line;
    while (std::getline(f, line)) {
        auto j = nlohmann::json::parse(line);
        if (j.contains("eval_loss")) last_eval = j["eval_loss"];
        else last_loss = j["loss"];
    }
    fs::remove_all(rd);
    std::printf("H %.4f, bigram bound %.4f, final loss %.4f, final eval loss %.4f\n",
                info.entropy_rate, info.bigram_bound, last_loss, last_eval);
    ASSERT_GT(last_eval, 0) << "no evaluation ran";
    for (double loss : {last_loss, last_eval}) {
        EXPECT_LT(loss, info.bigram_bound);
        EXPECT_LT(loss, info.entropy_rate + 0.3);
        // No model can beat the entropy rate by more than sampling noise (eval: 128 samples).
        EXPECT_GT(loss, info.entropy_rate - 0.05);
    }
}
