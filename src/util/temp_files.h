// Files and directories a run makes for itself in the temporary directory ($TMPDIR, else /tmp):
// generated click logs, converted Criteo files, streams the run writes. They are named
// zerotrain-<pid>-<n>-<what>. A run removes its own when it ends, however it fails, except when
// it is killed (SIGKILL, the OOM killer): Note [Orphaned temporary files].
#pragma once

#include <string>

namespace zt {

// A new path zerotrain-<pid>-<n>-<what> in the temporary directory (nothing is created). The
// first call of a process first removes what killed runs left there.
std::string make_temp_path(const std::string& what);

// Removes the entries of `dir` named zerotrain-<pid>-<n>-<what> whose process no longer runs;
// returns how many. Entries of running processes (this one included) are left alone.
int remove_orphaned_temp_files(const std::string& dir);

}  // namespace zt
