// A resumed run's TensorBoard events (Note [TensorBoard on resume]): readers see each step once,
// with the resumed run's values for the steps it ran again. Read back by TensorBoard's own
// EventAccumulator and, record by record, by its raw event file loader (no purging), over every
// file of the directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "run_command.h"
#include "runtime/monitor/tensorboard_sink.h"
#include "reader_required.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

MonitorRecord record(int64_t step, double loss) {
    MonitorRecord r;
    r.step = step;
    r.wall_time = 1.7e9 + static_cast<double>(step);
    r.scalars = {{"loss", loss}};
    return r;
}

// "tag step value" lines printed by `script` run over dir.
std::multimap<int64_t, double> read_loss(const fs::path& dir, const std::string& script) {
    const fs::path py = dir.parent_path() / "read.py";
    std::ofstream(py) << script;
    testing::CommandResult r =
        testing::run_command("python3 " + py.string() + " " + dir.string(), false);
    EXPECT_EQ(r.code, 0) << r.output;
    std::multimap<int64_t, double> m;
    std::istringstream in(r.output);
    std::string tag;
    int64_t step;
    double v;
    while (in >> tag >> step >> v)
        if (tag == monitor_tag("loss")) m.emplace(step, v);
    return m;
}

const char* kAccumulator = R"(import sys
from tensorboard.backend.event_processing import event_accumulator as ea
acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0})
acc.Reload()
for tag in acc.Tags()["scalars"]:
    for e in acc.Scalars(tag):
        print(tag, e.step, repr(e.value))
)";

const char* kRaw = R"(import os, sys
from tensorboard.backend.event_processing import event_file_loader
d = sys.argv[1]
for name in sorted(os.listdir(d)):
    if "tfevents" not in name:
        continue
    for e in event_file_loader.LegacyEventFileLoader(os.path.join(d, name)).Load():
        for v in e.summary.value:
            print(v.tag, e.step, repr(v.simple_value))
)";

TEST(TensorBoardResume, EachStepOnceAfterAResume) {
    if (testing::run_command("python3 -c 'import tensorboard' >/dev/null 2>&1").code != 0)
        ZT_READER_MISSING("python3 has no tensorboard (pip install tensorboard)");
    const fs::path root =
        fs::temp_directory_path() / ("zt_tb_resume_" + std::to_string(::getpid()));
    fs::remove_all(root);
    const fs::path dir = root / "job";
    {
        TensorBoardSink first(dir.string());  // ran steps 1-6, then failed
        for (int64_t s = 1; s <= 6; ++s) first.write(record(s, 10.0 + s));
    }
    {
        TensorBoardSink second(dir.string(), /*resumed_from=*/3);  // resumed at step 3
        for (int64_t s = 4; s <= 8; ++s) second.write(record(s, 20.0 + s));
    }
    std::multimap<int64_t, double> want;
    for (int64_t s = 1; s <= 3; ++s) want.emplace(s, 10.0 + s);
    for (int64_t s = 4; s <= 8; ++s) want.emplace(s, 20.0 + s);
    EXPECT_EQ(read_loss(dir, kAccumulator), want);
    EXPECT_EQ(read_loss(dir, kRaw), want);
    fs::remove_all(root);
}

TEST(TensorBoardResume, TruncateKeepsTheHeaderAndDropsATornRecord) {
    const fs::path root = fs::temp_directory_path() / ("zt_tb_trunc_" + std::to_string(::getpid()));
    fs::remove_all(root);
    std::string path;
    {
        TensorBoardSink sink((root / "job").string());
        path = sink.path();
        for (int64_t s = 1; s <= 4; ++s) sink.write(record(s, 1.0));
    }
    const auto full = fs::file_size(path);
    {
        std::ofstream(path, std::ios::binary | std::ios::app) << std::string(7, 'x');  // torn
    }
    EXPECT_EQ(truncate_event_file(path, 2), 3);  // steps 3, 4 and the torn tail
    const std::string e = tensorboard_scalar_event(1.7e9 + 1, 1, monitor_tag("loss"), 1.0f);
    EXPECT_EQ(fs::file_size(path), full - 2 * tfrecord_frame(e).size());
    EXPECT_EQ(truncate_event_file(path, 2), 0);  // nothing past step 2 is left
    fs::remove_all(root);
}

}  // namespace
}  // namespace zt
