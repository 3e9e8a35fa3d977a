// Logging to stderr with a level; rank-prefixed once ranks exist. Not a metrics sink.
#pragma once

#include <string>

#include "util/error.h"

namespace zt {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_message(LogLevel level, const std::string& msg);

template <typename... Args>
void log_info(const Args&... args) {
    if (log_level() <= LogLevel::kInfo) log_message(LogLevel::kInfo, str_cat(args...));
}
template <typename... Args>
void log_warn(const Args&... args) {
    if (log_level() <= LogLevel::kWarn) log_message(LogLevel::kWarn, str_cat(args...));
}
template <typename... Args>
void log_debug(const Args&... args) {
    if (log_level() <= LogLevel::kDebug) log_message(LogLevel::kDebug, str_cat(args...));
}

}  // namespace zt
