#include "runtime/monitor/prometheus_sink.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "util/error.h"

namespace zt {

namespace {

constexpr int kPollMs = 100;              // how soon the server thread sees a stop
constexpr size_t kMaxRequestBytes = 8192;  // a longer request head is answered as it is
constexpr size_t kMaxClients = 64;         // connections served at once; more wait in the backlog

// What each known figure means, for the HELP line.
const char* figure_help(const std::string& name) {
    static const std::map<std::string, const char*> kHelp = {
        {"loss", "Training loss of the latest step (mean over the global batch)"},
        {"lr", "Learning rate of the latest step"},
        {"grad_norm", "Gradient norm of the latest step (before clipping)"},
        {"step_time_s", "Wall time of the latest step"},
        {"tokens_per_s", "Tokens per second of the latest step"},
        {"samples_per_s", "Samples per second of the latest step (models without tokens)"},
        {"mfu_flops_per_s", "Model FLOP/s of the latest step"},
        {"mfu", "Model FLOPs utilization of the latest step against the GEMM ceiling"},
        {"comm_s", "Exposed communication time of the latest step"},
        {"compute_s", "Compute time of the latest step (step time less communication and I/O)"},
        {"io_s", "Data loading time of the latest step"},
        {"mem_peak_bytes", "Peak memory of the latest step"},
        {"loss_scale", "fp16 loss scale"},
        {"skipped", "1 when the latest step was skipped (non-finite gradients)"},
        {"eval_loss", "Latest evaluation loss"},
        {"eval_auc", "Latest evaluation ROC AUC (click models)"},
        {"eval_log_loss", "Latest evaluation log loss (click models)"},
        {"eval_samples", "Samples scored in the latest evaluation"},
        {"straggler", "1 when the rank was named a straggler at the latest report"},
        {"checkpoint_s", "Step-loop stall for the latest checkpoint"}};
    auto it = kHelp.find(name);
    return it == kHelp.end() ? nullptr : it->second;
}

std::string format_value(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}

void send_all(int fd, const std::string& s) {
    size_t done = 0;
    while (done < s.size()) {
        const ssize_t n = ::send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
        if (n <= 0) return;  // the client went away: nothing to report
        done += static_cast<size_t>(n);
    }
}

}  // namespace

std::string prometheus_metric_name(const std::string& figure, bool per_rank) {
    static const std::map<std::string, std::string> kRenamed = {
        {"lr", "learning_rate"},
        {"tokens_per_s", "tokens_per_second"},
        {"samples_per_s", "samples_per_second"},
        {"mfu_flops_per_s", "model_flops_per_second"},
        {"mfu", "mfu_ratio"}};
    auto it = kRenamed.find(figure);
    std::string n = it != kRenamed.end() ? it->second : figure;
    if (n.rfind("mem_", 0) == 0) n = "memory_" + n.substr(4);
    if (n.size() > 2 && n.compare(n.size() - 2, 2, "_s") == 0) n += "econds";
    for (char& c : n)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
    return (per_rank ? "zerotrain_rank_" : "zerotrain_") + n;
}

PrometheusSink::PrometheusSink(const std::string& address, int port, double request_timeout_s)
    : request_timeout_(std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(request_timeout_s))) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ZT_CHECK(listen_fd_ >= 0, "monitor.prometheus: socket() failed: ", std::strerror(errno));
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET, address.c_str(), &sa.sin_addr) != 1 ||
        ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
        ::listen(listen_fd_, 16) != 0) {
        const std::string why = std::strerror(errno);
        ::close(listen_fd_);
        ZT_FAIL("monitor.prometheus: cannot listen on ", address, ":", port, ": ", why,
                "; pick another monitor.prometheus.port (0: any free port)");
    }
    socklen_t len = sizeof sa;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.sin_port);
    thread_ = std::thread([this] { serve(); });
}

PrometheusSink::~PrometheusSink() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    ::close(listen_fd_);
}

void PrometheusSink::write(const MonitorRecord& r) {
    std::lock_guard<std::mutex> lock(mu_);
    step_ = r.step;
    for (const MonitorScalar& s : r.scalars) latest_[s.name] = s.value;
    for (size_t rank = 0; rank < r.ranks.size(); ++rank)
        for (const MonitorScalar& s : r.ranks[rank]) {
            std::vector<double>& v = rank_latest_[s.name];
            v.resize(r.ranks.size(), NAN);
            v[rank] = s.value;
        }
}

std::string PrometheusSink::render() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    auto head = [&](const std::string& metric, const std::string& figure, const char* fallback) {
        const char* help = figure_help(figure);
        out += "# HELP " + metric + " " + (help ? help : fallback) + "\n";
        out += "# TYPE " + metric + " gauge\n";
    };
    head("zerotrain_step", "", "Optimizer steps done");
    out += "zerotrain_step " + std::to_string(step_) + "\n";
    for (const auto& [name, v] : latest_) {
        const std::string m = prometheus_metric_name(name, false);
        head(m, name, ("metrics.jsonl field " + name).c_str());
        out += m + " " + format_value(v) + "\n";
    }
    for (const auto& [name, v] : rank_latest_) {
        const std::string m = prometheus_metric_name(name, true);
        head(m, name, ("per-rank figure " + name).c_str());
        for (size_t r = 0; r < v.size(); ++r)
            out += m + "{rank=\"" + std::to_string(r) + "\"} " + format_value(v[r]) + "\n";
    }
    return out;
}

// Note [Serving scrapes]: one thread polls the listening socket and every open connection
// together, so a client that connects and sends nothing (or sends slowly) holds only its own
// connection: the others are read and answered as their requests arrive. A connection whose
// request head is not complete within request_timeout_s of its accept is closed unanswered.
void PrometheusSink::serve() {
    struct Client {
        int fd;
        std::string request;
        Clock::time_point deadline;
    };
    std::vector<Client> clients;
    char buf[1024];
    while (!stop_) {
        std::vector<pollfd> fds;
        const short accepting = clients.size() < kMaxClients ? POLLIN : 0;
        fds.push_back({listen_fd_, accepting, 0});
        for (const Client& c : clients) fds.push_back({c.fd, POLLIN, 0});
        if (::poll(fds.data(), fds.size(), kPollMs) < 0 && errno != EINTR) break;
        const Clock::time_point now = Clock::now();
        std::vector<Client> open;
        for (size_t i = 0; i < clients.size(); ++i) {
            Client& c = clients[i];
            bool done = false, answer_now = false;
            if (fds[i + 1].revents != 0) {
                const ssize_t n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
                if (n > 0) c.request.append(buf, static_cast<size_t>(n));
                if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                    answer_now = !c.request.empty();  // a head cut short by a half-close
                    done = true;
                }
            }
            if (c.request.find("\r\n\r\n") != std::string::npos ||
                c.request.find("\n\n") != std::string::npos || c.request.size() >= kMaxRequestBytes)
                answer_now = done = true;
            if (now >= c.deadline) done = true;  // dropped unanswered
            if (answer_now) answer(c.fd, c.request);
            if (done)
                ::close(c.fd);
            else
                open.push_back(std::move(c));
        }
        clients = std::move(open);
        if ((fds[0].revents & POLLIN) != 0) {
            const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd >= 0) {
                timeval send_timeout{2, 0};  // a client that does not read is not waited for
                ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout);
                clients.push_back({fd, std::string(), now + request_timeout_});
            }
        }
    }
    for (const Client& c : clients) ::close(c.fd);
}

// Answers one request head; HTTP/1.0, one request per connection.
void PrometheusSink::answer(int fd, const std::string& req) const {
    const bool get = req.rfind("GET ", 0) == 0, head = req.rfind("HEAD ", 0) == 0;
    const size_t path_at = req.find(' ') + 1;
    const std::string path = req.substr(path_at, req.find_first_of(" ?\r\n", path_at) - path_at);
    std::string status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8", body;
    if (!get && !head) {
        status = "405 Method Not Allowed";
        type = "text/plain";
        body = "only GET /metrics\n";
    } else if (path != "/metrics") {
        status = "404 Not Found";
        type = "text/plain";
        body = "not found; the metrics are at /metrics\n";
    } else {
        body = render();
    }
    send_all(fd, "HTTP/1.0 " + status + "\r\nContent-Type: " + type +
                     "\r\nContent-Length: " + std::to_string(body.size()) +
                     "\r\nConnection: close\r\n\r\n" + (head ? std::string() : body));
}

}  // namespace zt
