// Sharded atomic checkpoints of a training run (docs/checkpoints.md; the format is
// checkpoint/manifest.h). Every rank writes its own shard: its owned range of the master weights
// and optimizer state (at stage 0 too, so the ranks share the writing); rank 0 then writes the
// manifest with every shard's size and CRC-32C, and renames the directory from step_N.partial to
// step_N, and then `latest` (Note [Checkpoint visibility]). Asynchronous checkpoints copy the state
// to staging buffers, write on a background thread, and are made visible by poll() at a later step
// boundary once every rank's write has finished. Collective calls: every rank makes them, in the
// same order.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/direct_io.h"
#include "checkpoint/manifest.h"
#include "runtime/checkpoint_chain.h"
#include "runtime/checkpoint_state_files.h"
#include "runtime/engine.h"

namespace zt {

struct CheckpointOptions {
    std::string dir;             // where step_N directories go (RUN_DIR/checkpoints)
    int64_t interval_steps = 0;  // a checkpoint every this many steps; 0: none
    int64_t keep_last = 0;       // keep this many newest checkpoints; 0: all
    bool async = false;          // write on a background thread
    // A failed write stops training ("on_error": "stop"); else a warning.
    bool stop_on_error = true;
    DirectIoOptions io;  // how shards are written and read (checkpoint/direct_io.h)
    // Incremental checkpoints of dynamic and sharded tables (Note [Incremental checkpoints]):
    // every K-th is full, the others hold what changed since the previous one; 0: every one full.
    int64_t full_every = 0;
};

// "step_00000012"
std::string checkpoint_name(int64_t step);
// Complete checkpoint directories under dir, newest first (the one `latest` names first).
std::vector<std::string> checkpoint_candidates(const std::string& dir);

class Checkpointer {
  public:
    Checkpointer(Engine& engine, Communicator* comm, CheckpointOptions options);
    ~Checkpointer();  // waits for a background write; does not make it visible
    Checkpointer(const Checkpointer&) = delete;
    Checkpointer& operator=(const Checkpointer&) = delete;

    const CheckpointOptions& options() const { return options_; }
    // Collective. A checkpoint of the engine as it is now (between optimizer steps): visible when
    // this returns, or, asynchronous, once poll() or finish() sees every rank's write done. A
    // pending asynchronous checkpoint is finished first (the next waits for the previous).
    void save();
    // Collective, once per step: makes a finished asynchronous checkpoint visible.
    void poll();
    // Collective: waits for a pending asynchronous checkpoint and makes it visible.
    void finish();
    int64_t last_visible_step() const { return last_visible_; }
    double last_save_stall_s() const { return stall_s_; }  // seconds save() held the step loop
    bool incremental() const { return incremental_; }      // some tables write increments
    // After a resume from m: on the same ranks the next increments continue m's chain.
    void resumed(const Manifest& m);
    // A file of the trainer's own state written into every checkpoint from now on (rank 0's
    // `source` is called when a checkpoint is staged; runtime/checkpoint_state_files.h).
    void add_state_file(std::string name, std::function<std::string()> source) {
        state_sources_[std::move(name)] = std::move(source);
    }
    // Once per visible checkpoint with incremental tables: {"step", "kind" ("full" or
    // "incremental"), "dynamic_bytes" and "static_bytes" (the bytes written of the dynamic and
    // of the sharded static tables, all ranks)}.
    std::optional<nlohmann::json> take_report();

  private:
    struct Pending;
    void start(Pending& p);
    void complete(bool wait);  // the collective end of a write: manifest, rename, latest, prune

    Engine& engine_;
    Communicator* comm_;
    CheckpointOptions options_;
    std::unique_ptr<Pending> pending_;
    std::vector<std::vector<float>> staging_;  // asynchronous: copies of this rank's state
    int64_t last_visible_ = -1;
    double stall_s_ = 0;
    bool incremental_ = false;      // full_every > 0 and some sparse tensor writes deltas
    std::vector<ChainLink> chain_;  // the checkpoints the next increment would build on
    bool force_full_ = false;       // a write failed after its changes were marked as saved
    std::optional<nlohmann::json> report_;
    StateFileSources state_sources_;
};

// Collective. Loads the newest checkpoint under dir that every rank can read and verify (sizes,
// CRC-32C, a model like the engine's) into the engine, whatever layout wrote it. Checkpoints that
// fail are skipped, each with a warning on rank 0 naming the reason (`skipped` gets the messages).
// Returns the manifest of the one loaded, or nothing when none could be.
std::optional<Manifest> resume_latest(Engine& engine, Communicator* comm, const std::string& dir,
                                      std::vector<std::string>* skipped = nullptr,
                                      const DirectIoOptions& io = {});

// Loads the sparse parameters' blocks (sharded embedding tables) of checkpoint `dir` that
// overlap what this rank holds, whatever plan wrote them; nothing when the engine has none.
void load_sparse_blocks(Engine& engine, const Manifest& m, const std::string& dir);

}  // namespace zt
