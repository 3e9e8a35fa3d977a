// Small files of the trainer's own state in checkpoints (docs/checkpoints.md): state that is not
// the engine's (the progressive validation window of a stream, ...), the same on every rank,
// written by rank 0 into the checkpoint's directory beside the shards and recorded in the
// manifest's trainer.state_files with its size and CRC-32C. A reader checks both; state that
// fails them is reported, and the run goes on without it (it is never the model's).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "checkpoint/manifest.h"

namespace zt {

// name -> a function that returns the state's bytes as of now.
using StateFileSources = std::map<std::string, std::function<std::string()>>;

// The files' bytes as of now (rank 0 calls it), recorded in m.trainer.state_files.
std::map<std::string, std::string> stage_state_files(const StateFileSources& sources, Manifest& m);
// Writes them into dir (a checkpoint's .partial directory), each fsynced.
void write_state_files(const std::string& dir, const std::map<std::string, std::string>& files);
// The file `name` of checkpoint dir (with manifest m), checked against its size and CRC-32C;
// nothing when m records none of that name. Throws zt::Error when it fails its checks.
std::optional<std::string> read_state_file(const std::string& dir, const Manifest& m,
                                           const std::string& name);

}  // namespace zt
