// Fault injection for tests of the supervisor (docs/launch.md): the environment variable ZT_FAULT
// makes a rank kill itself with SIGKILL at a chosen point, as a crash, kill -9 or a vanished host
// would end it. Nothing happens when ZT_FAULT is unset; a malformed ZT_FAULT is an input error.
// Each fault fires only on the launch attempt it names (ZT_LAUNCH_ATTEMPT, exported by
// `zerotrain launch`, 0 without it), so a restarted job does not die again at the same point.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zt {

// One fault of ZT_FAULT = "KIND:key=value:...[,KIND:...]".
//   KIND  "kill": after optimizer step `step`, before its metrics line and checkpoint;
//         "kill_in_checkpoint": while writing the shard of the checkpoint of step `step`, after
//         part of the file is written;
//         "kill_in_writeback": in step `step`, while a tiered embedding table (embedding.tier) has
//         written part of a batch of evicted rows back to its store;
//         "fail_start": when the rank starts training, before its first step.
//   keys  rank (default every rank), step (kill kinds: required), world (only in a job of that
//         many ranks; default any), attempt (default 0; "*" every attempt).
struct Fault {
    enum class Kind { kKill, kKillInCheckpoint, kKillInWriteback, kFailStart };
    Kind kind = Kind::kKill;
    int rank = -1;  // -1: every rank
    int64_t step = -1;
    int world = -1;   // -1: any world size
    int attempt = 0;  // -1: every attempt
};

// The faults of `spec` (ZT_FAULT's syntax); throws an input error naming what is malformed.
std::vector<Fault> parse_faults(const std::string& spec);

// Hooks; each SIGKILLs the calling process when a fault of ZT_FAULT matches. `shard_path` is the
// final name of the shard being written (a partial temporary file is left beside it).
void fault_after_step(int rank, int world, int64_t step);
void fault_in_checkpoint_write(int rank, int64_t step, const std::string& shard_path);
void fault_at_start(int rank, int world);
// `step`: the step being trained (from 1).
void fault_in_writeback(int rank, int64_t step);

}  // namespace zt
