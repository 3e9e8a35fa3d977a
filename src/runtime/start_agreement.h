// Agreement on the start of training across ranks (Note [Start agreement]): what a rank does
// before its first step that may fail on one rank alone (opening its data, reading init_from,
// taking the run directory's lock) runs inside agree_on_start, after which every rank knows
// whether any rank failed and throws alike, so no rank waits in a collective for one that has
// left, and an input error ends every rank with exit code 2 instead of an MPI abort.
#pragma once

#include <functional>
#include <string>

#include "comm/communicator.h"
#include "util/error.h"

namespace zt {

// An error every rank of the job throws alike (the CLI lets it end each rank on its own: no
// abort of the job).
class AgreedError : public Error {
public:
    using Error::Error;
};

// Collective when comm has several ranks: runs fn, then every rank throws an AgreedError when fn
// failed on any rank: the message of the lowest failed rank (prefixed with its number), of kind
// kInput when every failure was an input error, else kInternal. Without a communicator (or with
// one rank) fn's own error passes through unchanged. `what` names the phase for the message.
void agree_on_start(Communicator* comm, const std::string& what, const std::function<void()>& fn);

}  // namespace zt
