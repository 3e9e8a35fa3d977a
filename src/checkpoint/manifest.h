// Sharded checkpoints (DESIGN.md, Contracts: Checkpoints): RUN_DIR/checkpoints/step_NNNNNNNN/ holds
// manifest.json and one shard file per rank. A shard holds, for one contiguous range [lo, hi) of
// the flat parameter arena, the fp32 master weights ("master") and each optimizer state buffer
// ("exp_avg", ...), as 1-D F32 safetensors tensors; the ranges of all shards tile [0, numel), so
// any layout reads back the ranges it holds (docs/checkpoints.md). The manifest records the
// layout that wrote it, the model's parameters, the trainer's counters, and every shard's size and
// CRC-32C. parse_manifest validates everything it returns: a manifest that parses can be used to
// read shards without reading or writing out of bounds.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace zt {

constexpr int kCheckpointFormatVersion = 2;  // 2: manifest.json carries its own checksum
constexpr const char* kCheckpointFormat = "zerotrain-checkpoint";

struct CheckpointParam {
    std::string name;
    std::vector<int64_t> shape;  // the whole tensor's
    int64_t offset = 0;          // in the flat arena (of each tensor-parallel part)
    // Tensor parallelism (autograd/module.h, ParamSplit): split_dim >= 0 means each of the
    // layout's tp parts holds its part of the tensor (split_blocks blocks along split_dim, each
    // cut into tp parts); -1: every part holds it whole (part 0's copy is read).
    int split_dim = -1;
    int64_t split_blocks = 1;
    // Pipeline parallelism: the stage whose arena holds it (offset is in that stage's arena). A
    // parameter two stages hold (a tied embedding) is listed under both.
    int stage = 0;
};

struct CheckpointFile {
    std::string file;  // name inside the checkpoint directory (no path)
    int rank = 0;
    int64_t lo = 0, hi = 0;  // arena range it holds
    uint64_t bytes = 0;
    uint32_t crc32c = 0;
    int tp_part = 0;   // the tensor-parallel part whose arena it holds
    int pp_stage = 0;  // the pipeline stage whose arena it holds
};

struct Manifest {
    int64_t step = 0;     // optimizer steps done, skipped ones included (the data cursor)
    int64_t updates = 0;  // optimizer updates done (Adam's bias-correction count, the schedule)
    // The layout that wrote it.
    int ranks = 1, dp = 1, tp = 1, pp = 1, zero_stage = 0;
    std::string compute_dtype = "f32", grad_dtype = "f32";
    // The model.
    int64_t numel = 0;  // arena length without padding (of each tensor-parallel part)
    // pp > 1: each stage's arena length (numel is stage 0's); empty otherwise.
    std::vector<int64_t> stage_numel;
    int64_t numel_of(int stage) const {
        return stage_numel.empty() ? numel : stage_numel[static_cast<size_t>(stage)];
    }
    std::vector<CheckpointParam> params;
    std::string optimizer;              // optimizer name ("AdamW", "SGD", ...)
    std::vector<std::string> tensors;   // in every shard: "master", then the optimizer's state
    std::vector<CheckpointFile> files;  // ordered by pp stage, tp part, then range
    nlohmann::json trainer = nlohmann::json::object();  // the runtime's own state (loss scaler)
};

nlohmann::json manifest_to_json(const Manifest& m);
// Throws zt::Error (kInput) naming `where` and what is wrong: another format, a newer format
// version, wrong types, ranges that do not tile [0, numel) for each tp part, file names with a
// path, parameters outside the arena, splits that do not divide.
Manifest parse_manifest(const nlohmann::json& j, const std::string& where);
// DIR/manifest.json: its checksum verified before anything else is read from it (Note [Sealed
// manifest], checkpoint/sealed_text.h), then parsed and validated; when DIR is named step_N, the
// manifest's step must be N.
Manifest read_manifest(const std::string& dir);
// Writes DIR/manifest.json, sealed with its checksum, atomically (temporary name, fsync, rename,
// fsync of DIR).
void write_manifest(const std::string& dir, const Manifest& m);

}  // namespace zt
