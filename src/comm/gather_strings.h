// Every rank's string, on every rank of a group (metadata of unequal length: parameter lists,
// names). Built on two all-gathers: the lengths, then the bytes.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"

namespace zt {

// Collective over c: out[r] is rank r's `mine`.
std::vector<std::string> all_gather_strings(Communicator& c, const std::string& mine);

}  // namespace zt
