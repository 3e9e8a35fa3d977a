// What each pipeline stage is doing, asked for by a stage whose wait timed out (Note [Pipeline
// watchdog] in pipeline_runner.cpp). Each stage keeps one receive posted per other stage on a
// channel of its own (a split of the pipeline group); a stage that waits serves the requests it
// finds there with its current activity, so the one that timed out can say what the stage it
// waits for is doing: "stage 0 is in backward of micro-batch 1, waiting for the gradients of
// micro-batch 1 from stage 1". close() retires the posted receives at a point every stage reaches
// (the end of training); a failed run leaves them (their buffers are never freed).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace zt {

struct StageActivity {
    int op = -1;  // a PipeOpKind value; -1: between steps
    int micro = 0, chunk = 0;
    int waiting = 0;  // 0: computing; 1: receiving activations; 2: receiving gradients; 3: sending
    int peer = -1;    // the stage waited for
    int wait_micro = 0;
};
// "in backward of micro-batch 1 (chunk 0), waiting for the gradients of micro-batch 1 from
// stage 1"; chunks named when `chunks` > 1.
std::string describe_activity(const StageActivity& a, int chunks);

class PipelineStatus {
  public:
    explicit PipelineStatus(Communicator& pp);  // collective over pp
    PipelineStatus(const PipelineStatus&) = delete;
    PipelineStatus& operator=(const PipelineStatus&) = delete;
    ~PipelineStatus();

    void set(const StageActivity& a) { mine_ = a; }
    const StageActivity& get() const { return mine_; }
    // Answers the requests that arrived; cheap, called from every wait loop.
    void serve();
    // Asks `stage` for its activity, serving meanwhile; nothing when it did not answer within
    // `seconds` (it computes, or it is gone).
    std::optional<StageActivity> ask(int stage, double seconds);
    // Retires the posted receives: every stage says goodbye and waits for every other's (up to
    // `seconds`). Collective; call it where every stage arrives (the end of training).
    void close(double seconds);

  private:
    using Msg = std::array<int64_t, 8>;
    void post(int from);
    std::unique_ptr<Communicator> chan_;
    int me_ = 0, n_ = 1;
    StageActivity mine_;
    std::vector<Msg*> req_buf_;    // per stage: the posted receive's buffer (owned)
    std::vector<CommHandle> req_;  // per stage: the posted receive, or null
    std::vector<std::pair<Msg*, CommHandle>> sent_;  // replies and goodbyes in flight
    bool closed_ = false;
};

}  // namespace zt
