#include "util/error.h"

#include <cstring>

namespace zt {

namespace {
std::string base_name(const char* file) {
    const char* slash = std::strrchr(file, '/');
    return slash ? slash + 1 : file;
}
}  // namespace

Error::Error(ErrorKind kind, const char* file, int line, const std::string& msg)
    : std::runtime_error(msg + " [" + base_name(file) + ":" + std::to_string(line) + "]"),
      kind_(kind),
      message_(msg) {}

}  // namespace zt
