#include "runtime/progress.h"

#include <cstdio>

#include "util/timer.h"

namespace zt {

std::string format_duration(double s) {
    char buf[32];
    if (s < 0) s = 0;
    long t = static_cast<long>(s + 0.5);
    if (t < 60)
        std::snprintf(buf, sizeof buf, "%lds", t);
    else if (t < 3600)
        std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
    else
        std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
    return buf;
}

Progress::Progress(int64_t total_steps, int64_t print_every, bool tty)
    : total_(total_steps),
      print_every_(print_every < 1 ? 1 : print_every),
      tty_(tty),
      start_s_(now_s()) {}

void Progress::update(int64_t step, const std::string& status) {
    double elapsed = now_s() - start_s_;
    if (total_ <= 0) {  // a stream: no end known, no bar and no ETA
        if (tty_) {
            if (bar_drawn_ && now_s() - last_draw_s_ < 0.1) return;
            last_draw_s_ = now_s();
            std::fprintf(stderr, "\r\033[Kstep %lld %s | %s elapsed", static_cast<long long>(step),
                         status.c_str(), format_duration(elapsed).c_str());
            std::fflush(stderr);
            bar_drawn_ = true;
        } else if (step % print_every_ == 0 || step == 1) {
            std::fprintf(stderr, "step %lld | %s | elapsed %s\n", static_cast<long long>(step),
                         status.c_str(), format_duration(elapsed).c_str());
        }
        return;
    }
    double eta =
        step > 0 ? elapsed / static_cast<double>(step) * static_cast<double>(total_ - step) : 0;
    if (tty_) {
        // Redraw at most ten times a second (and always for the last step).
        if (step != total_ && bar_drawn_ && now_s() - last_draw_s_ < 0.1) return;
        last_draw_s_ = now_s();
        const int width = 24;
        int filled = total_ > 0 ? static_cast<int>(width * step / total_) : width;
        std::string bar(filled, '#');
        bar.resize(width, '.');
        std::fprintf(stderr, "\r\033[K[%s] %lld/%lld %s | %s elapsed, ETA %s", bar.c_str(),
                     static_cast<long long>(step), static_cast<long long>(total_), status.c_str(),
                     format_duration(elapsed).c_str(), format_duration(eta).c_str());
        std::fflush(stderr);
        bar_drawn_ = true;
    } else if (step % print_every_ == 0 || step == total_ || step == 1) {
        std::fprintf(stderr, "step %lld/%lld | %s | elapsed %s, ETA %s\n",
                     static_cast<long long>(step), static_cast<long long>(total_), status.c_str(),
                     format_duration(elapsed).c_str(), format_duration(eta).c_str());
    }
}

void Progress::message(const std::string& line) {
    if (tty_ && bar_drawn_) std::fprintf(stderr, "\r\033[K");
    std::fprintf(stderr, "%s\n", line.c_str());
    bar_drawn_ = false;
}

void Progress::finish() {
    if (tty_ && bar_drawn_) std::fprintf(stderr, "\n");
    bar_drawn_ = false;
}

}  // namespace zt
