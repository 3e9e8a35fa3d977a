// Note [Orphaned temporary files]: what a killed run left in the temporary directory is removed
// by the next run (a zombie's too); a running process's entries and names of other forms are left alone.
#include "util/temp_files.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "util/error.h"

namespace fs = std::filesystem;

namespace {

// The pid of a process that has ended (a child reaped at once).
pid_t ended_pid() {
    const pid_t p = ::fork();
    if (p == 0) ::_exit(0);
    int status = 0;
    ::waitpid(p, &status, 0);
    return p;
}

}  // namespace

TEST(TempFiles, RemovesTheEntriesOfEndedProcessesOnly) {
    const fs::path dir = fs::temp_directory_path() / zt::str_cat("zt-temp-files-test-", ::getpid());
    fs::remove_all(dir);
    fs::create_directories(dir);
    const pid_t dead = ended_pid(), alive = ::getpid();
    const pid_t zombie = ::fork();  // ended, not reaped yet: gone all the same
    if (zombie == 0) ::_exit(0);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ofstream(dir / zt::str_cat("zerotrain-", zombie, "-2-synth.ctr")) << "x";
    const std::string orphan_dir = zt::str_cat("zerotrain-", dead, "-0-stream");
    fs::create_directories(dir / orphan_dir / "parts");
    std::ofstream(dir / orphan_dir / "parts" / "part-000000.ztclick") << "x";
    const std::vector<std::string> kept = {
        zt::str_cat("zerotrain-", alive, "-1-synth.ctr"),   // a running process's
        zt::str_cat("zerotrain-swap-", dead, "-x.bin"),     // another form (offload's own rule)
        zt::str_cat("zerotrain-", dead, "-stream"),         // no counter: not ours
        "unrelated.txt",
    };
    const std::string orphan_file = zt::str_cat("zerotrain-", dead, "-7-criteo.ctr");
    for (const std::string& f : kept) std::ofstream(dir / f) << "x";
    std::ofstream(dir / orphan_file) << "x";

    EXPECT_EQ(zt::remove_orphaned_temp_files(dir.string()), 3);
    int status = 0;
    ::waitpid(zombie, &status, 0);
    EXPECT_FALSE(fs::exists(dir / orphan_dir));
    EXPECT_FALSE(fs::exists(dir / orphan_file));
    for (const std::string& f : kept) EXPECT_TRUE(fs::exists(dir / f)) << f;
    EXPECT_EQ(zt::remove_orphaned_temp_files(dir.string()), 0);
    fs::remove_all(dir);
}

TEST(TempFiles, PathsAreUniqueAndNameThisProcess) {
    const std::string a = zt::make_temp_path("x"), b = zt::make_temp_path("x");
    EXPECT_NE(a, b);
    EXPECT_NE(fs::path(a).filename().string().find(zt::str_cat("zerotrain-", ::getpid(), "-")),
              std::string::npos);
    EXPECT_EQ(fs::path(a).parent_path(), fs::temp_directory_path());
}
