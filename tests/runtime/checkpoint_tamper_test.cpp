// Every byte of a checkpoint's manifest is covered by a checksum (docs/checkpoints.md, "Integrity"):
// each single-bit flip of every byte of a real manifest is refused by read_manifest (what
// `checkpoint inspect` and export read) and makes resume skip that checkpoint and fall back to
// the previous one. Also `latest`: a damaged one is not trusted, resume takes the newest
// checkpoint by its step instead.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "checkpoint/manifest.h"
#include "runtime/checkpointer.h"
#include "runtime/config.h"
#include "runtime/trainer.h"
#include "util/error.h"
#include "util/log.h"

namespace zt {

namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

void write_all_bytes(const fs::path& p, const std::string& s) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
}

class CheckpointTamper : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("zt_tamper_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        // The smallest model that has every part of a manifest: 1 layer, AdamW (two state
        // tensors), a checkpoint after every step: step_00000005 (`latest`) falls back to 4,
        // and a flipped bit in `latest` can name an older one that exists ('5' -> '4', '1').
        nlohmann::json j = {{"train_micro_batch_size_per_gpu", 2},
                            {"steps", 5},
                            {"steps_per_print", 1},
                            {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}},
                            {"model",
                             {{"type", "gpt"}, {"vocab_size", 32}, {"seq_len", 8}, {"d_model", 8},
                              {"n_layers", 1}, {"n_heads", 2}}},
                            {"data", {{"type", "builtin"}, {"builtin_tokens", 1024}}},
                            {"checkpoint", {{"interval_steps", 1}}},
                            {"threads", 1}};
        cfg_ = parse_config(j).config;
        TrainOptions o;
        o.run_dir = (dir_ / "run").string();
        o.quiet = true;
        run_training(cfg_, o);
        ck_ = dir_ / "run" / "checkpoints";
        ASSERT_TRUE(fs::exists(ck_ / "step_00000005" / "manifest.json"));
        ASSERT_TRUE(fs::exists(ck_ / "step_00000004" / "manifest.json"));
    }
    void TearDown() override { fs::remove_all(dir_); }

    // Resumes a fresh engine from ck_: the step it continued from (-1: none), the skipped ones.
    int64_t resume(Engine& engine, std::vector<std::string>* skipped) {
        skipped->clear();
        std::optional<Manifest> m = resume_latest(engine, nullptr, ck_.string(), skipped);
        return m ? m->step : -1;
    }

    fs::path dir_, ck_;
    TrainConfig cfg_;
};

}  // namespace

TEST_F(CheckpointTamper, EveryBitFlipOfTheManifestIsDetectedAndResumeFallsBack) {
    const fs::path mpath = ck_ / "step_00000005" / "manifest.json";
    const std::string good = read_all(mpath);
    ASSERT_GT(good.size(), 500u);
    MemoryPool pool;
    Engine engine(pool, build_model(cfg_), engine_options(cfg_));
    std::vector<std::string> skipped;
    ASSERT_EQ(resume(engine, &skipped), 5);
    ASSERT_TRUE(skipped.empty());
    int64_t undetected_read = 0, undetected_resume = 0;
    const LogLevel level = log_level();
    set_log_level(LogLevel::kError);  // one "skipping checkpoint" warning per flip otherwise
    std::string first_miss;
    for (size_t i = 0; i < good.size(); ++i) {
        for (int bit = 0; bit < 8; ++bit) {
            std::string bad = good;
            bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
            write_all_bytes(mpath, bad);
            bool refused = false;
            try {
                read_manifest(mpath.parent_path().string());
            } catch (const Error& e) {
                refused = e.kind() == ErrorKind::kInput;
            }
            const int64_t from = resume(engine, &skipped);
            const bool fell_back = from == 4 && skipped.size() == 1;
            if (!refused) ++undetected_read;
            if (!fell_back) ++undetected_resume;
            if ((!refused || !fell_back) && first_miss.empty())
                first_miss = "byte " + std::to_string(i) + " ('" + std::string(1, good[i]) +
                             "') bit " + std::to_string(bit) + ": resume from " +
                             std::to_string(from);
        }
    }
    set_log_level(level);
    write_all_bytes(mpath, good);
    EXPECT_EQ(undetected_read, 0) << "of " << good.size() * 8 << " flips; first: " << first_miss;
    EXPECT_EQ(undetected_resume, 0) << "of " << good.size() * 8 << " flips; first: " << first_miss;
    EXPECT_EQ(resume(engine, &skipped), 5) << "the restored manifest reads again";
}

TEST_F(CheckpointTamper, ManifestMustAgreeWithItsDirectoryName) {
    // A whole, valid checkpoint under another step's name: refused, resume falls back.
    fs::rename(ck_ / "step_00000005", ck_ / "step_00000007");
    std::ofstream(ck_ / "latest") << "step_00000007\n";
    std::string msg;
    try {
        read_manifest((ck_ / "step_00000007").string());
    } catch (const Error& e) {
        msg = e.message();
    }
    EXPECT_NE(msg.find("directory name"), std::string::npos) << msg;
    MemoryPool pool;
    Engine engine(pool, build_model(cfg_), engine_options(cfg_));
    std::vector<std::string> skipped;
    EXPECT_EQ(resume(engine, &skipped), 4);
    EXPECT_EQ(skipped.size(), 1u);
}

TEST_F(CheckpointTamper, EveryBitFlipOfLatestIsDetected) {
    // `latest` names step 5; a flipped bit may name step 4 or 1, which exist: resume must not
    // trust a damaged `latest` and takes the newest checkpoint by its step, 5.
    const fs::path lpath = ck_ / "latest";
    const std::string good = read_all(lpath);
    MemoryPool pool;
    Engine engine(pool, build_model(cfg_), engine_options(cfg_));
    std::vector<std::string> skipped;
    for (size_t i = 0; i < good.size(); ++i)
        for (int bit = 0; bit < 8; ++bit) {
            std::string bad = good;
            bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
            write_all_bytes(lpath, bad);
            const std::vector<std::string> c = checkpoint_candidates(ck_.string());
            ASSERT_FALSE(c.empty());
            EXPECT_EQ(fs::path(c[0]).filename(), "step_00000005")
                << "byte " << i << " bit " << bit << ": " << bad;
        }
    write_all_bytes(lpath, good);
}

}  // namespace zt
