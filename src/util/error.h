// Errors: ZT_CHECK for user and input errors (zt::Error of kind kInput, exit code 2 at the CLI),
// ZT_ASSERT for broken invariants (kind kInternal, exit code 1). Messages say what, expected, got, fix.
// Only cli/main.cpp turns errors into exit codes.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace zt {

enum class ErrorKind { kInput, kInternal };

class Error : public std::runtime_error {
public:
    Error(ErrorKind kind, const char* file, int line, const std::string& msg);
    ErrorKind kind() const { return kind_; }
    // The message without the file:line prefix.
    const std::string& message() const { return message_; }

private:
    ErrorKind kind_;
    std::string message_;
};

template <typename... Args>
std::string str_cat(const Args&... args) {
    std::ostringstream os;
    (os << ... << args);
    return os.str();
}

}  // namespace zt

#define ZT_CHECK(cond, ...)                                                              \
    do {                                                                                 \
        if (!(cond))                                                                     \
            throw ::zt::Error(::zt::ErrorKind::kInput, __FILE__, __LINE__,               \
                              ::zt::str_cat(__VA_ARGS__));                               \
    } while (0)

#define ZT_ASSERT(cond, ...)                                                             \
    do {                                                                                 \
        if (!(cond))                                                                     \
            throw ::zt::Error(::zt::ErrorKind::kInternal, __FILE__, __LINE__,            \
                              ::zt::str_cat("internal error: " #cond " ", ##__VA_ARGS__)); \
    } while (0)

#define ZT_FAIL(...) \
    throw ::zt::Error(::zt::ErrorKind::kInput, __FILE__, __LINE__, ::zt::str_cat(__VA_ARGS__))
