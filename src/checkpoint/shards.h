// Checkpoint shard files (manifest.h): one per rank, its arena range of the master weights and of
// each optimizer state buffer as 1-D F32 safetensors tensors, and reading any arena range back
// from whichever shards hold it (resharding to another layout reads only the ranges it needs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"

namespace zt {

std::string shard_file_name(int rank);  // "rank_00000.safetensors"

// Writes DIR/shard_file_name(rank) durably: names[i] holds data[i], hi - lo floats each.
CheckpointFile write_shard(const std::string& dir, int rank, int64_t lo, int64_t hi,
                           const std::vector<std::string>& names,
                           const std::vector<const float*>& data, const DirectIoOptions& io = {});

// Throws zt::Error (kInput) naming the file when its size or CRC-32C is not the manifest's
// (a truncated, corrupted or replaced shard). Reads the whole file once (direct_io.h).
void verify_shard(const std::string& dir, const CheckpointFile& f, const DirectIoOptions& io = {});

// Reads arena ranges of a checkpoint's tensors from whichever shards hold them. Each shard that
// holds a queued range is read once, front to back (direct_io.h), while its CRC-32C is checked
// and the queued ranges are copied out as their bytes pass; so a resume reads every byte it needs
// from the disk once, and a shard that fails its check is named in the error.
class ShardReader {
public:
    // The manifest must outlive the reader.
    ShardReader(std::string dir, const Manifest& manifest, DirectIoOptions io = {});
    // Queues out[0, hi - lo) = tensor `name` over the arena range [lo, hi); elements at or past
    // the arena's numel (a layout's padding) read as 0. `out` must stay valid until run().
    void add(const std::string& name, int64_t lo, int64_t hi, float* out);
    // Reads every queued range. On an error the outputs hold partial data: use them only after
    // run() returned. Clears the queue.
    void run();
    // add() then run().
    void read(const std::string& name, int64_t lo, int64_t hi, float* out);

private:
    struct Request {
        std::string name;
        int64_t lo, hi;
        float* out;
    };
    void read_shard(const CheckpointFile& f, const std::vector<Request>& queue);

    std::string dir_;
    const Manifest& m_;
    DirectIoOptions io_;
    std::vector<Request> queue_;
};

}  // namespace zt
