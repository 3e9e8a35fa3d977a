// Helpers shared by the DLRM command-line tests: a small sharded DLRM config, whole files, the
// tensors of a weight file, and checkpoint chains (docs/checkpoints.md).
#pragma once

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "runtime/checkpoint_chain.h"
#include "util/error.h"

namespace zt::testing {

// The last evaluation loss in a run's metrics.jsonl; -1 when none ran.
inline double last_eval_loss(const std::filesystem::path& run) {
    double loss = -1;
    std::ifstream in(run / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
        const nlohmann::json j = nlohmann::json::parse(line);
        if (j.contains("eval_loss")) loss = j["eval_loss"].get<double>();
    }
    return loss;
}

// Two ranks' worth of a DLRM with a row-sharded, a table-sharded and a replicated table (dim 8),
// lazy Adam for the tables, SGD for the MLPs, two micro-batches of 32 a step, synthetic data.
inline nlohmann::json small_sharded_dlrm(int64_t steps) {
    return {{"train_micro_batch_size_per_gpu", 32},
            {"gradient_accumulation_steps", 2},
            {"steps", steps},
            {"steps_per_print", 1},
            {"optimizer", {{"type", "SGD"}, {"params", {{"lr", 0.1}}}}},
            {"model",
             {{"type", "dlrm"},
              {"table_rows", {4001, 2500, 40}},
              {"embedding_dim", 8},
              {"bottom_mlp", {16, 8}},
              {"top_mlp", {16}}}},
            {"embedding",
             {{"sharding", {"row", "table", "data_parallel"}},
              {"optimizer", {{"type", "adam"}, {"lr", 0.02}}}}},
            {"data", {{"type", "synthetic"}, {"records", 4000}, {"eval_records", 0}}},
            {"threads", 1}};
}

// The compression tests' DLRM: a row-sharded, a table-sharded and a replicated table (dim 8),
// SGD for everything, one micro-batch of 16 a step, MLPs `width` wide, synthetic data.
inline nlohmann::json compression_dlrm(int64_t steps, int64_t width) {
    return {{"train_micro_batch_size_per_gpu", 16},
            {"steps", steps},
            {"steps_per_print", 1},
            {"optimizer", {{"type", "SGD"}, {"params", {{"lr", 0.1}}}}},
            {"model",
             {{"type", "dlrm"},
              {"table_rows", {3001, 700, 40}},
              {"embedding_dim", 8},
              {"bottom_mlp", {width, 8}},
              {"top_mlp", {width}}}},
            {"embedding", {{"sharding", {"row", "table", "data_parallel"}}}},
            {"data", {{"type", "synthetic"}, {"records", 2000}}},
            {"threads", 1}};
}

inline std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// A U64 tensor (a dynamic table's ids) exactly; throws when it is missing or of another dtype.
inline std::vector<uint64_t> read_u64(const SafetensorsFile& f, const std::string& name) {
    const SafetensorsTensor* t = f.find(name);
    ZT_CHECK(t != nullptr && t->dtype == "U64", f.path(), ": no U64 tensor ", name);
    std::vector<uint64_t> ids(static_cast<size_t>(t->numel));
    std::memcpy(ids.data(), f.data(name).data(), ids.size() * 8);
    return ids;
}

// The tensors of a safetensors file by name, as doubles (ids as their u64 values, exact below
// 2^53; read_u64 for wider ones).
inline std::map<std::string, std::vector<double>> read_tensors(const std::filesystem::path& p) {
    std::map<std::string, std::vector<double>> out;
    const SafetensorsFile f(p.string());
    for (const auto& t : f.tensors()) {
        std::vector<double>& v = out[t.name];
        if (t.dtype == "U64") {
            const std::vector<uint64_t> ids = read_u64(f, t.name);
            v.assign(ids.begin(), ids.end());
        } else {
            std::vector<float> w(static_cast<size_t>(t.numel));
            f.read_f32(t.name, w.data(), t.numel);
            v.assign(w.begin(), w.end());
        }
    }
    return out;
}

// The checkpoints an incremental one at `ck` builds on, oldest first (none for a full one).
inline std::vector<std::string> chain_names(const std::filesystem::path& ck) {
    std::vector<std::string> out;
    for (const ChainLink& l : chain_of(read_manifest(ck.string()))) out.push_back(l.name);
    return out;
}

// Copies the named checkpoints of run `from` into run `to`'s checkpoint directory.
inline void copy_checkpoints(const std::filesystem::path& from, const std::filesystem::path& to,
                             const std::vector<std::string>& names) {
    namespace fs = std::filesystem;
    fs::create_directories(to / "checkpoints");
    for (const std::string& n : names)
        fs::copy(from / "checkpoints" / n, to / "checkpoints" / n, fs::copy_options::recursive);
}

}  // namespace zt::testing
