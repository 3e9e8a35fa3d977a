// Installing signal handlers with sigaction, checked: preemption (SIGTERM writes a checkpoint) and
// the launcher's shutdown depend on the handler being in place, so a failed sigaction is an error
// naming the signal, not a silent default action later.
#pragma once

namespace zt {

// sigaction(sig) with `handler`, an empty mask and `flags`. Throws zt::Error (kInternal: the
// environment's failure, exit code 1) naming the signal and errno when sigaction refuses it.
void set_signal_handler(int sig, void (*handler)(int), int flags = 0);

}  // namespace zt
