// Checkpoint manifests and shards: a manifest that parses is safe to read shards with; hostile or
// damaged manifests and shards are refused with a message naming what is wrong; any arena range
// reads back from the shards that hold it.
#include "checkpoint/manifest.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/shards.h"
#include "util/error.h"

namespace zt {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

Manifest sample() {
    Manifest m;
    m.step = 10;
    m.updates = 9;
    m.ranks = m.dp = 2;
    m.zero_stage = 2;
    m.numel = 10;
    m.params = {{"a", {2, 3}, 0}, {"b", {4}, 6}};
    m.optimizer = "AdamW";
    m.tensors = {"master", "exp_avg"};
    m.files = {{"rank_00000.safetensors", 0, 0, 5, 100, 7},
               {"rank_00001.safetensors", 1, 5, 10, 100, 8}};
    return m;
}

std::string error_of(const json& j) {
    try {
        parse_manifest(j, "m.json");
    } catch (const Error& e) {
        return e.message();
    }
    return "";
}

}  // namespace

TEST(Manifest, RoundTrips) {
    const Manifest m = sample();
    const Manifest n = parse_manifest(manifest_to_json(m), "x");
    EXPECT_EQ(manifest_to_json(n), manifest_to_json(m));
    EXPECT_EQ(n.files[1].lo, 5);
    EXPECT_EQ(n.params[1].name, "b");
}

TEST(Manifest, HostileOrDamagedManifestsAreRefusedByName) {
    const json good = manifest_to_json(sample());
    struct Case {
        std::function<void(json&)> edit;
        std::string mentions;
    };
    const std::vector<Case> cases = {
        {[](json& j) { j["format"] = "other"; }, "format \"other\""},
        {[](json& j) { j["format_version"] = kCheckpointFormatVersion + 1; },
         "newer zerotrain (format version " + std::to_string(kCheckpointFormatVersion + 1)},
        {[](json& j) { j.erase("files"); }, "missing \"files\""},
        {[](json& j) {
             j["files"][1]["range"] = {6, 10};
         },
         "next range starts at 5"},
        {[](json& j) {
             j["files"][1]["range"] = {5, 11};
         },
         "the arena has 10 elements"},
        {[](json& j) { j["files"].erase(1); }, "cover [0, 5) of 10"},
        {[](json& j) { j["files"][0]["file"] = "../etc/passwd"; }, "not a plain name"},
        {[](json& j) { j["files"][0]["file"] = "rank_00001.safetensors"; }, "twice"},
        {[](json& j) { j["model"]["params"][1]["offset"] = 8; }, "runs past the arena"},
        {[](json& j) { j["model"]["params"][0]["shape"] = {-1}; }, "bad shape"},
        {[](json& j) { j["tensors"] = {"exp_avg"}; }, "must be \"master\""},
        {[](json& j) { j["layout"]["dp"] = 3; }, "outside [1, 2]"},
        {[](json& j) { j["step"] = "ten"; }, "\"step\" is not an integer"},
        {[](json& j) { j["files"][0]["crc32c"] = -1; }, "not a non-negative integer"},
        {[](json& j) { j = json::array(); }, "not a JSON object"},
        // Found by fuzz/manifest_fuzz.cpp: products that overflowed int64 before the checks.
        {[](json& j) {
             j["model"]["params"][0]["shape"] = {int64_t{1} << 50, int64_t{1} << 50};
         },
         "is too large"},
        {[](json& j) {
             j["layout"] = {{"ranks", 1 << 24},   {"dp", 1 << 24},   {"tp", 1 << 24},
                            {"pp", 1 << 24},      {"zero_stage", 0}, {"compute_dtype", "f32"},
                            {"grad_dtype", "f32"}};
         },
         "is not the 16777216 ranks"},
    };
    for (const Case& c : cases) {
        json j = good;
        c.edit(j);
        const std::string e = error_of(j);
        EXPECT_NE(e.find(c.mentions), std::string::npos)
            << "expected \"" << c.mentions << "\" in: " << e;
        EXPECT_NE(e.find("m.json"), std::string::npos) << e;
    }
}

// Pipeline stages: each stage's parameters (a tied one under both stages) in its own arena, its
// files tiling that arena; a stage's files that do not cover it are refused by name.
TEST(Manifest, PipelineStagesRoundTripAndTileEachStage) {
    Manifest m = sample();
    m.ranks = m.pp = 2;
    m.dp = 1;
    m.numel = 10;
    m.stage_numel = {10, 7};
    m.params = {
        {"a", {2, 3}, 0}, {"b", {4}, 6}, {"a", {2, 3}, 0, -1, 1, 1}, {"c", {1}, 6, -1, 1, 1}};
    m.files = {{"rank_00000.safetensors", 0, 0, 10, 100, 7, 0, 0},
               {"rank_00001.safetensors", 1, 0, 7, 100, 8, 0, 1}};
    const Manifest n = parse_manifest(manifest_to_json(m), "x");
    EXPECT_EQ(manifest_to_json(n), manifest_to_json(m));
    EXPECT_EQ(n.params[2].stage, 1);
    EXPECT_EQ(n.files[1].pp_stage, 1);
    EXPECT_EQ(n.numel_of(1), 7);
    json j = manifest_to_json(m);
    j["files"][1]["range"] = {0, 6};
    EXPECT_NE(error_of(j).find("cover [0, 6) of 7 elements of tp part 0 of 1 of pp stage 1"),
              std::string::npos)
        << error_of(j);
    j = manifest_to_json(m);
    j["model"]["params"][3]["offset"] = 7;
    EXPECT_NE(error_of(j).find("runs past the arena of 7"), std::string::npos) << error_of(j);
    j = manifest_to_json(m);
    j["model"]["stage_numel"] = {10};
    EXPECT_NE(error_of(j).find("1 entries for 2 pipeline stages"), std::string::npos);
    j = manifest_to_json(m);
    j["files"].erase(0);
    EXPECT_NE(error_of(j).find("starts tp part 0 of pp stage 1 after part 0 of stage 0"),
              std::string::npos)
        << error_of(j);
}

TEST(Shards, AnyRangeReadsBackAndDamageIsDetected) {
    const fs::path dir = fs::temp_directory_path() / ("zt_shards_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    Manifest m = sample();
    std::vector<float> master(10), avg(10);
    for (int i = 0; i < 10; ++i) {
        master[i] = static_cast<float>(i);
        avg[i] = static_cast<float>(100 + i);
    }
    m.files.clear();
    for (int r = 0; r < 2; ++r)
        m.files.push_back(write_shard(dir.string(), r, 5 * r, 5 * r + 5, {"master", "exp_avg"},
                                      {master.data() + 5 * r, avg.data() + 5 * r}));
    ShardReader reader(dir.string(), m);
    std::vector<float> out(8);
    reader.read("master", 3, 11, out.data());  // across both shards and past numel
    EXPECT_EQ(out, (std::vector<float>{3, 4, 5, 6, 7, 8, 9, 0}));
    reader.read("exp_avg", 4, 6, out.data());
    EXPECT_EQ(out[0], 104);
    EXPECT_EQ(out[1], 105);
    EXPECT_THROW(reader.read("momentum", 0, 1, out.data()), Error);

    // One flipped byte, then a truncated file: each named.
    const fs::path f1 = dir / m.files[1].file;
    {
        std::fstream f(f1, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(fs::file_size(f1) - 1));
        f.put('\x7f');
    }
    try {
        verify_shard(dir.string(), m.files[1]);
        ADD_FAILURE() << "a flipped byte went unnoticed";
    } catch (const Error& e) {
        EXPECT_NE(e.message().find("is corrupted"), std::string::npos) << e.message();
    }
    fs::resize_file(f1, fs::file_size(f1) - 1);
    try {
        ShardReader fresh(dir.string(), m);
        fresh.read("master", 5, 6, out.data());
        ADD_FAILURE() << "a truncated shard went unnoticed";
    } catch (const Error& e) {
        EXPECT_NE(e.message().find("truncated"), std::string::npos) << e.message();
    }
    fs::remove_all(dir);
}

}  // namespace zt
