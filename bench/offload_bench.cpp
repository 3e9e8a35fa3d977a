// offload_bench: the optimizer step of an offload tier (offload/update_state.h) on --numel f32
// parameters with AdamW and a bf16 compute copy, as the engine runs it: master weights and moments
// on the tier ("cpu" or "nvme" under --path), streamed a sub-group at a time through
// --buffers staging buffers. Per step: seconds, the update's share, the time spent waiting for the
// disk, and the bytes moved; one line `RESULT {json}` with all steps and their medians.
// bench/offload_step.py runs it beside fio's sequential read and write of the same disk
// (docs/benchmarks-offload.md).
//
//   build/bench/offload_bench --numel 200000000 --device nvme --path /tmp/swap
//       --sub-group 25000000 --buffers 4 --steps 3 --threads 2   (one line)
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "offload/update_tier.h"
#include "optim/adamw.h"
#include "util/timer.h"

namespace {

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    int64_t numel = 100000000;
    zt::OffloadOptimizerOptions o;
    o.device = "nvme";
    o.sub_group_size = 25000000;
    int steps = 3, threads = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--numel")
            numel = std::atoll(v.c_str());
        else if (k == "--device")
            o.device = v;
        else if (k == "--path")
            o.nvme_path = v;
        else if (k == "--sub-group")
            o.sub_group_size = std::atoll(v.c_str());
        else if (k == "--buffers")
            o.buffer_count = std::atoi(v.c_str());
        else if (k == "--queue-depth")
            o.aio.queue_depth = std::atoi(v.c_str());
        else if (k == "--steps")
            steps = std::atoi(v.c_str());
        else if (k == "--threads")
            threads = std::atoi(v.c_str());
        else {
            std::fprintf(stderr, "offload_bench: unknown option %s\n", k.c_str());
            return 2;
        }
    }
    omp_set_num_threads(threads);
    zt::MemoryPool pool;
    zt::AdamW adam(zt::AdamWOptions{});
    std::vector<uint16_t> copy(static_cast<size_t>(numel));
    std::vector<float> grads(static_cast<size_t>(numel));
    for (int64_t i = 0; i < numel; ++i)
        grads[static_cast<size_t>(i)] = 1e-3f * static_cast<float>((i * 2654435761u) % 2001) - 1.0f;
    const std::vector<zt::OptimSegment> segs{{0, numel, true}};
    zt::Stopwatch init_sw;
    auto state = zt::make_update_state(o, adam, pool, nullptr, numel,
                                       {copy.data(), zt::DType::kBF16}, "bench");
    state->init([](int64_t lo, int64_t n, float* out) {
        for (int64_t i = 0; i < n; ++i) out[i] = 1e-3f * static_cast<float>((lo + i) % 1000);
    });
    const double init_s = init_sw.elapsed_s();
    nlohmann::json per_step = nlohmann::json::array();
    std::vector<double> step_s, gbps, wait_s, compute_s;
    for (int s = 1; s <= steps; ++s) {
        const zt::UpdateStateStats a = state->stats();
        state->step(grads.data(), segs, 1e-3f, s);
        const zt::UpdateStateStats b = state->stats();
        const double dt = b.step_s - a.step_s;
        const double bytes = static_cast<double>((b.bytes_read - a.bytes_read) +
                                                 (b.bytes_written - a.bytes_written));
        step_s.push_back(dt);
        gbps.push_back(bytes / dt / 1e9);
        wait_s.push_back(b.io_wait_s - a.io_wait_s);
        compute_s.push_back(b.compute_s - a.compute_s);
        per_step.push_back({{"step_s", dt},
                            {"compute_s", compute_s.back()},
                            {"io_wait_s", wait_s.back()},
                            {"read_bytes", b.bytes_read - a.bytes_read},
                            {"written_bytes", b.bytes_written - a.bytes_written},
                            {"disk_gb_per_s", gbps.back()}});
        std::fprintf(stderr, "step %d: %.3f s, update %.3f s, waited %.3f s, %.2f GB/s\n", s, dt,
                     compute_s.back(), wait_s.back(), gbps.back());
    }
    const zt::UpdateStateStats st = state->stats();
    nlohmann::json r = {{"numel", numel},
                        {"device", o.device},
                        {"sub_group_size", o.sub_group_size},
                        {"buffer_count", o.buffer_count},
                        {"queue_depth", o.aio.queue_depth},
                        {"threads", threads},
                        {"tier_bytes", st.tier_bytes},
                        {"staging_bytes", st.staging_bytes},
                        {"init_s", init_s},
                        {"steps", per_step},
                        {"median_step_s", median(step_s)},
                        {"median_compute_s", median(compute_s)},
                        {"median_io_wait_s", median(wait_s)},
                        {"median_disk_gb_per_s", median(gbps)}};
    std::printf("RESULT %s\n", r.dump().c_str());
    return 0;
}
