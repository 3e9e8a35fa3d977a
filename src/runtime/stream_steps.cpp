#include "runtime/stream_steps.h"

namespace zt {

bool on_any_rank(Communicator* comm, bool mine) {
    int32_t v = mine ? 1 : 0;
    if (comm != nullptr && comm->size() > 1) comm->all_reduce(&v, 1, CommType::kI32)->wait();
    return v > 0;
}

bool stream_step_ready(RunData& data, Communicator* comm, int64_t end) {
    if (!data.is_stream()) return true;  // all there: no wait, no collective
    return !on_any_rank(comm, !data.wait_for_train(end));
}

}  // namespace zt
