// Progress display: a one-line bar with ETA redrawn in place on a terminal, plain lines every
// `print_every` steps otherwise (logs, CI).
#pragma once

#include <cstdint>
#include <string>

namespace zt {

class Progress {
  public:
    // total_steps 0: no end known (a stream): the step and elapsed time, no bar and no ETA.
    Progress(int64_t total_steps, int64_t print_every, bool tty);
    // Reports step `step` (1-based) with a short status text ("loss 2.31 | 1200 tok/s").
    void update(int64_t step, const std::string& status);
    void message(const std::string& line);  // a full line that does not break the bar
    void finish();

  private:
    int64_t total_;
    int64_t print_every_;
    bool tty_;
    double start_s_;
    bool bar_drawn_ = false;
    double last_draw_s_ = 0;
};

std::string format_duration(double seconds);  // "1m05s", "2h03m"

}  // namespace zt
