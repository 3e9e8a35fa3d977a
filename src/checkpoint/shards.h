// Checkpoint shard files (manifest.h): one per rank, its arena range of the master weights and of
// each optimizer state buffer as 1-D F32 safetensors tensors, and reading any arena range back
// from whichever shards hold it (resharding to another layout reads only the ranges it needs).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"

namespace zt {

std::string shard_file_name(int rank);  // "rank_00000.safetensors"

// Writes DIR/shard_file_name(rank) durably: names[i] holds data[i], hi - lo floats each.
CheckpointFile write_shard(const std::string& dir, int rank, int64_t lo, int64_t hi,
                           const std::vector<std::string>& names,
                           const std::vector<const float*>& data);

// Throws zt::Error (kInput) naming the file when its size or CRC-32C is not the manifest's
// (a truncated, corrupted or replaced shard).
void verify_shard(const std::string& dir, const CheckpointFile& f);

class ShardReader {
public:
    // The manifest must outlive the reader.
    ShardReader(std::string dir, const Manifest& manifest);
    // out[0, hi - lo) = tensor `name` over the arena range [lo, hi); elements at or past the
    // arena's numel (a layout's padding) read as 0. Each shard is verified when first opened.
    void read(const std::string& name, int64_t lo, int64_t hi, float* out);

private:
    const SafetensorsFile& open(size_t index);

    std::string dir_;
    const Manifest& m_;
    std::map<size_t, std::unique_ptr<SafetensorsFile>> open_;
};

}  // namespace zt
