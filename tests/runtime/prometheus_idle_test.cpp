// The Prometheus endpoint serves connections side by side (Note [Serving scrapes]): an idle
// connection that stays open delays no scrape. Event-based: the scrape must be answered while
// the idle connection is still open (a server that answered in turn would have had to drop it
// first); every wait is generous and none is a verdict.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "runtime/monitor/prometheus_sink.h"

namespace zt {
namespace {

int connect_to(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    return fd;
}

// Reads until the server closes, waiting at most timeout_ms for each piece.
std::string read_all(int fd, int timeout_ms) {
    std::string out;
    char buf[4096];
    for (;;) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, timeout_ms) <= 0) break;
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        out.append(buf, static_cast<size_t>(n));
    }
    return out;
}

// True while the server has neither closed fd nor sent anything on it.
bool still_open(int fd) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;
}

TEST(PrometheusIdle, ScrapeAnsweredWhileAnIdleConnectionStaysOpen) {
    PrometheusSink sink("127.0.0.1", 0, /*request_timeout_s=*/600);
    MonitorRecord r;
    r.step = 7;
    r.scalars = {{"loss", 1.5}};
    sink.write(r);
    const int idle = connect_to(sink.port());  // sends nothing
    const int half = connect_to(sink.port());  // sends half a request
    ASSERT_EQ(::send(half, "GET /met", 8, 0), 8);
    for (int i = 0; i < 3; ++i) {
        const int fd = connect_to(sink.port());
        const std::string req = "GET /metrics HTTP/1.0\r\n\r\n";
        ASSERT_EQ(::send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
        const std::string resp = read_all(fd, 60000);
        ::close(fd);
        ASSERT_EQ(resp.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << resp;
        EXPECT_NE(resp.find("zerotrain_step 7\n"), std::string::npos) << resp;
        EXPECT_TRUE(still_open(idle)) << "the idle connection was closed to serve scrape " << i;
        EXPECT_TRUE(still_open(half));
    }
    // The half-sent request, finished, is answered too.
    ASSERT_EQ(::send(half, "rics HTTP/1.0\r\n\r\n", 17, 0), 17);
    EXPECT_EQ(read_all(half, 60000).rfind("HTTP/1.0 200 OK\r\n", 0), 0u);
    ::close(half);
    ::close(idle);
}

// The read timeout: a connection that never sends its request is closed by the server.
TEST(PrometheusIdle, SilentConnectionClosedAfterTheRequestTimeout) {
    PrometheusSink sink("127.0.0.1", 0, /*request_timeout_s=*/0.2);
    const int idle = connect_to(sink.port());
    EXPECT_EQ(read_all(idle, 60000), "");  // returns at the server's close, well within 60 s
    pollfd p{idle, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 0), 1);  // readable: end of stream
    ::close(idle);
}

}  // namespace
}  // namespace zt
