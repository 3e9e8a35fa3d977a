// Error messages as a user meets them (issue 12, "Messages"): each names the option or config key,
// what was expected and what was given, and exits 2 (bad input).
#include <gtest/gtest.h>

#include "checkpoint/manifest.h"
#include "cli/cli_fixture.h"
#include "util/error.h"

using zt::testing::Cli;
using zt::testing::CommandResult;
using zt::testing::run_zerotrain;
namespace fs = std::filesystem;

namespace {

class Messages : public Cli {
  protected:
    CommandResult train(const nlohmann::json& j, const std::string& args = "") {
        return run_zerotrain("train " + write_config(j) + " --quiet --run-dir " +
                             (dir_ / "run").string() + " " + args);
    }
};

void expect_mentions(const std::string& out, const std::vector<std::string>& parts) {
    for (const std::string& p : parts)
        EXPECT_NE(out.find(p), std::string::npos) << "expected \"" << p << "\" in:\n" << out;
}

TEST_F(Messages, RankCountZeroNamesTheOption) {
    const std::string cfg = write_config(tiny());
    CommandResult r = run_zerotrain("train " + cfg + " --ranks 0");
    EXPECT_EQ(r.code, 2) << r.output;
    expect_mentions(r.output, {"--ranks: expected an integer >= 1, got 0"});
    EXPECT_EQ(r.output.find("not in range"), std::string::npos) << r.output;

    r = run_zerotrain("launch -n 0 -- train " + cfg);
    EXPECT_EQ(r.code, 2) << r.output;
    expect_mentions(r.output, {"--np: expected an integer >= 1, got 0"});
    EXPECT_EQ(r.output.find("not in range"), std::string::npos) << r.output;

    r = run_zerotrain("launch -n 2 --max-restarts -1 -- train " + cfg);
    EXPECT_EQ(r.code, 2) << r.output;
    expect_mentions(r.output, {"--max-restarts: expected an integer >= 0, got -1"});
}

TEST_F(Messages, DirectoryAsTokenFileSaysSo) {
    nlohmann::json j = tiny();
    j["data"] = {{"type", "tokens"}, {"path", dir_.string()}};
    CommandResult r = train(j);
    EXPECT_EQ(r.code, 2) << r.output;
    expect_mentions(r.output,
                    {"data.path", dir_.string(), "is a directory", "expected a token file"});
    EXPECT_EQ(r.output.find("No such device"), std::string::npos) << r.output;
}

TEST_F(Messages, MissingEvalFileNamesEvalPath) {
    CommandResult tok = run_zerotrain("data tokenize " + std::string(ZT_SOURCE_DIR) +
                                      "/README.md " + (dir_ / "train.bin").string());
    ASSERT_EQ(tok.code, 0) << tok.output;
    nlohmann::json j = tiny();
    j.erase("eval_interval");
    j["data"] = {{"type", "tokens"},
                 {"path", (dir_ / "train.bin").string()},
                 {"eval_path", (dir_ / "missing.bin").string()}};
    j["model"]["vocab_size"] = 256;
    CommandResult r = train(j);
    EXPECT_EQ(r.code, 2) << r.output;
    expect_mentions(r.output, {"missing.bin", "check data.eval_path"});
    EXPECT_EQ(r.output.find("check data.path"), std::string::npos) << r.output;
}

// A manifest whose parameter sits at another offset: the message shows both offsets, not two
// descriptions that read the same.
TEST_F(Messages, ManifestOffsetMismatchShowsOffsets) {
    nlohmann::json j = tiny();
    j.erase("eval_interval");
    j["steps"] = 2;
    j["checkpoint"] = {{"interval_steps", 2}};
    ASSERT_EQ(train(j).code, 0);
    const std::string ck = (dir_ / "run" / "checkpoints" / "step_00000002").string();
    zt::Manifest m = zt::read_manifest(ck);
    ASSERT_GE(m.params.size(), 2u);
    const int64_t was = m.params[1].offset;
    m.params[1].offset = was + 1;  // still inside the arena, so the manifest itself parses
    zt::write_manifest(ck, m);
    j["steps"] = 3;
    CommandResult r = train(j, "--resume");
    EXPECT_EQ(r.code, 2) << r.output;
    expect_mentions(r.output, {"is of another model", zt::str_cat("at offset ", was + 1),
                               zt::str_cat("at offset ", was)});
}

}  // namespace
