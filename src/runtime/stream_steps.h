// The trainer's part of streaming data (docs/streaming.md): before each step every rank waits for
// the step's records (RunData::wait_for_train), and the ranks agree, so that a stream that ends
// stops every rank after the same step; checkpoints every interval_seconds are agreed the same way.
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "models/family.h"

namespace zt {

// Whether global training samples [0, end) have arrived on every rank. For a stream
// (RunData::is_stream) collective over comm (null or one rank: this rank alone); other data is
// all there, and nothing is communicated.
bool stream_step_ready(RunData& data, Communicator* comm, int64_t end);

// Whether `mine` holds on any rank of comm (null or one rank: mine). Collective. For decisions
// every rank must take together from what each sees differently (a clock: checkpoint
// interval_seconds).
bool on_any_rank(Communicator* comm, bool mine);

}  // namespace zt
