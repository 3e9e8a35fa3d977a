// The error-feedback residuals of compressed gradient communication (docs/compression.md) in a
// checkpoint: one file per rank, comm_state_RRRRR.safetensors, beside the shards. They are this
// rank's own state (not a partition of the arena), so they restore only into a run whose
// transport has the same layout (codec, ranks, this rank, buckets); otherwise they restart at zero
// and the caller says so. The file holds a CRC-32C of its data in its metadata. Written after the
// rank's shard in the same checkpoint directory; not listed in the manifest (a checkpoint without
// it loads as one whose residuals were zero).
#pragma once

#include <string>
#include <vector>

#include "runtime/engine.h"

namespace zt {

// A copy of this rank's residuals (empty where the run has no error feedback), so that an
// asynchronous checkpoint can write it while training goes on.
struct CommStateCopy {
    std::string layout;
    std::vector<size_t> index;  // into GradTransport::residuals()
    std::vector<std::vector<float>> data;
    bool empty() const { return layout.empty(); }
};

std::string comm_state_file_name(int rank);  // "comm_state_00000.safetensors"
CommStateCopy copy_comm_state(Engine& e);
void write_comm_state(const std::string& dir, int rank, const CommStateCopy& c);
// Restores this rank's residuals from checkpoint `dir`. Returns why they restart at zero instead
// (empty when they were restored, or when the run has none).
std::string read_comm_state(const std::string& dir, int rank, Engine& e);

}  // namespace zt
