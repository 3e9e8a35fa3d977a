// Ranks end when their supervisor dies (docs/launch.md): `zerotrain launch` exports its pid and
// host (ZT_SUPERVISOR_PID, ZT_SUPERVISOR_HOST) to the job; a rank on that host watches the pid
// (pidfd) on a thread of its own and ends itself when the supervisor is gone, so that a kill -9
// of the supervisor does not leave the ranks training unsupervised. The launcher itself (mpirun)
// ends by PR_SET_PDEATHSIG (cli/launch_process.cpp). Ranks on other hosts are ended by their
// launcher's daemons when mpirun is gone.
#pragma once

namespace zt {

constexpr const char* kSupervisorPidEnv = "ZT_SUPERVISOR_PID";
constexpr const char* kSupervisorHostEnv = "ZT_SUPERVISOR_HOST";

// Starts the watch when this process runs under a supervisor on this host; else does nothing.
void end_with_supervisor();

}  // namespace zt
