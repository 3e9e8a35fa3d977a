#include "runtime/stream_steps.h"

namespace zt {

bool stream_step_ready(RunData& data, Communicator* comm, int64_t end) {
    int32_t ended = data.wait_for_train(end) ? 0 : 1;
    if (comm != nullptr && comm->size() > 1)
        comm->all_reduce(&ended, 1, CommType::kI32)->wait();
    return ended == 0;
}

}  // namespace zt
