#include "planner/speed_now.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "tensor/gemm.h"
#include "util/error.h"
#include "util/host_load.h"
#include "util/median.h"
#include "util/timer.h"

namespace zt {

// Note [Kernel times at the host's speed now]
// A shape is timed once and its time kept (Note [Times by shape]); the host is a VM whose speed
// moves under it. On the 2-vCPU Xeon of session 30 the one-thread products of GPT config S,
// timed at 19:45, took a median 1.13-1.17x as long when timed again at 22:40 (33 shapes, three
// re-timings; the two-thread ones a median 1.0), and every one-thread layout ran 12-17% over its
// prediction: config S at micro 2 on one thread 0.726 s against 0.643 predicted, 0.741 from the
// shapes timed again; the 4-rank layouts (one thread a rank) 1.17-1.27. No process of ours or
// anyone else's on the guest was busy: the host's other tenants, its clock or its caches.
//
// So the minute's speed is measured beside every time kept: whenever products are timed at a
// thread count, the process also times one reference product (f32 C[512 x 512] = A B^T over
// 512, warm, 30 ms of calls after 10 of warm-up, the best of three runs as the shapes are) and
// records it beside each product's time (MachineProfile::shape_ref_s); the calibration records
// it with its rates (ThreadRates::speed_ref_s). When a plan or a run is costed, the references
// at its thread counts are timed again (about 40 ms each, on a quiet host only) and each
// product's time is multiplied by now / then, the GEMM and attention rates divided by it. The
// reference is f32's for bf16 products too: a bf16 reference on AMX varied by 15% from one
// process to the next here (2.5-3.2 ms at one thread), f32's by 3%. The machine's profile keeps
// the times as measured; only the plan's copy is rescaled (its references set to now, so a copy
// saved with a run, plan_profile.json, reads consistently). Lookups, interactions, exchanges,
// elementwise passes and collectives are left as measured: memory-bound, their drift need not
// follow the products'. Entries without a reference (profiles from before session 30) stay as
// they are.
//
// A team's reference is kept only when the team had its cores (team_had_its_cores: at least
// 1 / 0.75 as fast as one thread; timed twice at most): in 7 of 12 fresh processes here the
// two-thread reference ran at one thread's speed (1.2-1.5 ms against 0.77-0.83), with the
// threads pinned to the two vCPUs or not, while the one-thread one held at 1.46-1.56 ms in
// every process: the host takes the second vCPU away for a while. Such an instant says nothing
// of the minutes a run lasts (the same config's steps do not vary so), so it scales nothing.

namespace {

constexpr double kRefSeconds = 0.03;  // of calls, as three runs of 10 ms
constexpr int64_t kRefN = 512;        // the reference product's m, n and k
// A team's reference is its cores' only when it ran at least 1 / 0.75 as fast as one thread.
constexpr double kTeamSpeedup = 0.75;

std::vector<std::string> words_of(const std::string& s) {
    std::istringstream in(s);
    std::vector<std::string> w;
    for (std::string x; in >> x;) w.push_back(x);
    return w;
}

}  // namespace

int speed_ref_threads_of_shape(const std::string& shape_key) {
    const std::vector<std::string> w = words_of(shape_key);
    if (w.size() < 3 || w[0] != "gemm" || w[2].size() < 2 || w[2][0] != 't') return 0;
    return std::max(0, std::atoi(w[2].c_str() + 1));
}

double time_speed_reference(int threads) {
    const ThreadCountScope scope(threads);
    const size_t n = static_cast<size_t>(kRefN * kRefN);
    std::vector<float> a(n, 0.01f), b(n, 0.01f), c(n);
    const GemmOperand A{a.data(), kRefN, false}, B{b.data(), kRefN, true};
    const auto call = [&] {
        gemm(kRefN, kRefN, kRefN, 1.0f, A, B, DType::kF32, 0.0f, c.data(), kRefN, DType::kF32);
    };
    // Warmed up for a third of the time first: a process's first calls at a thread count ran
    // up to 1.2x the steady time here (the team's threads, the library's kernels).
    for (const Stopwatch warm; warm.elapsed_s() < kRefSeconds / 3;) call();
    return seconds_per_call(call, kRefSeconds);
}

bool team_had_its_cores(double one_thread_s, double team_s) {
    return team_s > 0 && team_s <= kTeamSpeedup * one_thread_s;
}

double speed_reference(MachineProfile& p, int threads) {
    auto it = p.speed_now.find(threads);
    if (it != p.speed_now.end()) return it->second;
    double s = 0;
    if (threads <= 1) {
        s = time_speed_reference(1);
    } else {
        const double one = speed_reference(p, 1);
        for (int attempt = 0; attempt < 2 && s == 0; ++attempt) {
            const double t = time_speed_reference(threads);
            if (team_had_its_cores(one, t)) s = t;
        }
    }
    p.speed_now[threads] = s;
    return s;
}

std::map<int, double> rescale_to_speed(MachineProfile& p, const std::map<int, double>& now) {
    std::map<int, std::vector<double>> factors;
    for (auto& [key, then] : p.shape_ref_s) {
        const int t = speed_ref_threads_of_shape(key);
        const auto it = now.find(t);
        auto s = p.shape_s.find(key);
        if (it == now.end() || s == p.shape_s.end() || then <= 0 || it->second <= 0) continue;
        const double f = it->second / then;
        s->second *= f;
        then = it->second;
        factors[t].push_back(f);
    }
    for (ThreadRates& r : p.rates) {
        const auto it = now.find(r.threads);
        if (it == now.end() || r.speed_ref_s <= 0 || it->second <= 0) continue;
        const double f = it->second / r.speed_ref_s;
        for (auto& dt : r.gemm_flops)
            for (double& rate : dt) rate /= f;
        r.attention_flops /= f;
        r.speed_ref_s = it->second;
        factors[r.threads].push_back(f);
    }
    std::map<int, double> out;
    for (const auto& [t, fs] : factors) out[t] = median(fs);
    return out;
}

std::string at_current_speed(MachineProfile& p, const std::set<int>& threads,
                             const LoadProbe& probe) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    // The thread counts asked for that the profile holds references at, on this machine's
    // cores.
    std::set<int> named;
    for (const auto& [key, then] : p.shape_ref_s) named.insert(speed_ref_threads_of_shape(key));
    for (const ThreadRates& r : p.rates)
        if (r.speed_ref_s > 0) named.insert(r.threads);
    std::set<int> wanted;
    for (int t : threads)
        if (t >= 1 && t <= cores && named.count(t)) wanted.insert(t);
    if (wanted.empty()) return "";
    std::map<int, double> now;
    const double busy = probe([&] {
        for (int t : wanted)
            if (const double r = speed_reference(p, t); r > 0) now[t] = r;
    });
    if (busy > kBusyOtherCores)
        return str_cat("; the host was busy while its speed was timed (other processes used ",
                       cores_text(busy), "): kernel times as measured");
    const std::map<int, double> f = rescale_to_speed(p, now);
    if (f.empty()) return "";
    std::string parts;
    for (const auto& [t, x] : f) {
        char ratio[48];
        std::snprintf(ratio, sizeof ratio, "%.2fx at %d thread%s", x, t, t == 1 ? "" : "s");
        parts += str_cat(parts.empty() ? "" : ", ", ratio);
    }
    return str_cat("; kernel times at the host's speed now (", parts, " of when timed)");
}

}  // namespace zt
