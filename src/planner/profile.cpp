#include "planner/profile.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tensor/gemm.h"
#include "tensor/gemm_machine.h"
#include "util/error.h"
#include "util/random.h"

namespace zt {

double all_reduce_bus_factor(int ranks) { return 2.0 * (ranks - 1) / ranks; }
double shard_bus_factor(int ranks) { return static_cast<double>(ranks - 1) / ranks; }

// Note [Collective times between sizes]
// The calibration times each collective at 4 KiB, 256 KiB, 4 MiB and 16 MiB (and, since session
// 30, 64 and 128 MiB cold: Note [Large collectives timed cold], calibrate.cpp). One line through
// them by least squares is the large sizes' line: on this machine's local backend it put an
// all-reduce at 25 us + 5.4 GB/s where 4 KiB and 256 KiB measured 167 and 132 us, and a 16 MiB
// one at 3.1 ms where it measured 3.2 (the cache's edge: 4 MiB took 0.54 ms). The DLRM example's
// 309 KB gradient all-reduce was predicted at 82 us and measured at 240 (two thread-ranks). So a
// size between two measured ones takes the straight line between them; one below the smallest
// takes the smallest's time (a call's fixed cost dominates there); one past the largest adds the
// rest at the last two points' rate. A larger buffer never takes less time than a smaller, so
// each point's time is at most the next larger one's (the measurement of the larger bounds it;
// noise only adds). Other rank counts read the same points at their own bus bytes. The line
// stays for profiles written before the points were kept (and `bench calibrate` prints it).
double CollectiveFit::time_s(double bytes, double bus_factor) const {
    const double x = bus_factor * bytes;
    if (points.size() >= 2) {
        if (x <= points.front().first) return points.front().second;
        for (size_t i = 1; i < points.size(); ++i) {
            const auto& [x0, y0] = points[i - 1];
            const auto& [x1, y1] = points[i];
            if (x <= x1) return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
        }
        const auto& [x0, y0] = points[points.size() - 2];
        const auto& [x1, y1] = points.back();
        return y1 + (y1 - y0) / (x1 - x0) * (x - x1);
    }
    if (bus_bytes_per_s <= 0) return 0;
    return latency_s + x / bus_bytes_per_s;
}

void CollectiveFit::set_points(const std::vector<std::pair<double, double>>& measured,
                               double bus_factor) {
    points.clear();
    for (const auto& [bytes, s] : measured)
        if (bytes > 0 && s > 0) points.emplace_back(bus_factor * bytes, s);
    std::sort(points.begin(), points.end());
    // Distinct sizes only (the first of equal ones), then each time at most the next one's.
    points.erase(std::unique(points.begin(), points.end(),
                             [](const auto& a, const auto& b) { return a.first == b.first; }),
                 points.end());
    for (size_t i = points.size(); i-- > 1;)
        points[i - 1].second = std::min(points[i - 1].second, points[i].second);
    if (points.size() < 2) points.clear();
}

void CommProfile::fit_points(const std::string& what) {
    const auto measured = [&](const char* name) {
        std::vector<std::pair<double, double>> v;
        if (!points.is_object() || !points.contains(name)) return v;
        const nlohmann::json& pts = points[name];
        ZT_CHECK(pts.is_array(), what, ": profile points of ", name, " are not a list");
        for (const nlohmann::json& xy : pts) {
            ZT_CHECK(xy.is_array() && xy.size() == 2 && xy[0].is_number() && xy[1].is_number(),
                     what, ": profile point ", xy.dump(), " of ", name, " is not [bytes, seconds]");
            v.emplace_back(xy[0].get<double>(), xy[1].get<double>());
        }
        return v;
    };
    all_reduce.set_points(measured("all_reduce"), all_reduce_bus_factor(ranks));
    reduce_scatter.set_points(measured("reduce_scatter"), shard_bus_factor(ranks));
    all_gather.set_points(measured("all_gather"), shard_bus_factor(ranks));
    send_recv.set_points(measured("send_recv"), 1.0);
}

ThreadRates MachineProfile::at_threads(int threads) const {
    ZT_ASSERT(!rates.empty(), "profile: no measured rates");
    threads = std::max(1, threads);
    auto scaled = [](const ThreadRates& r, double f, int t) {
        ThreadRates o = r;
        o.threads = t;
        for (auto& d : o.gemm_flops)
            for (double& x : d) x *= f;
        o.attention_flops *= f;
        // Memory bandwidth is shared: more threads than measured do not add to it.
        if (f < 1) o.elementwise_bytes_per_s *= f;
        return o;
    };
    if (threads <= rates.front().threads)
        return scaled(rates.front(), static_cast<double>(threads) / rates.front().threads, threads);
    if (threads >= rates.back().threads) {
        ThreadRates o = rates.back();
        o.threads = threads;
        return o;  // past the measured cores: no faster
    }
    for (size_t i = 1; i < rates.size(); ++i) {
        const ThreadRates& a = rates[i - 1];
        const ThreadRates& b = rates[i];
        if (threads > b.threads) continue;
        const double w = static_cast<double>(threads - a.threads) / (b.threads - a.threads);
        ThreadRates o = a;
        o.threads = threads;
        for (int d = 0; d < 2; ++d)
            for (int z = 0; z < 2; ++z)
                o.gemm_flops[d][z] = a.gemm_flops[d][z] * (1 - w) + b.gemm_flops[d][z] * w;
        o.attention_flops = a.attention_flops * (1 - w) + b.attention_flops * w;
        o.op_overhead_s = a.op_overhead_s * (1 - w) + b.op_overhead_s * w;
        o.team_region_s = a.team_region_s * (1 - w) + b.team_region_s * w;
        o.team_min_elems = a.team_min_elems * (1 - w) + b.team_min_elems * w;
        o.elementwise_bytes_per_s =
            a.elementwise_bytes_per_s * (1 - w) + b.elementwise_bytes_per_s * w;
        return o;
    }
    return rates.back();
}

const CommProfile* MachineProfile::comm_for(const std::string& backend, int ranks) const {
    const CommProfile* best = nullptr;
    double best_gap = 0;
    for (const CommProfile& c : comm) {
        if (c.backend != backend) continue;
        if (ranks <= 0) return &c;
        const double gap = std::abs(std::log(static_cast<double>(std::max(1, c.ranks)) / ranks));
        if (!best || gap < best_gap - 1e-12 || (gap <= best_gap + 1e-12 && c.ranks > best->ranks)) {
            best = &c;
            best_gap = gap;
        }
    }
    if (best) return best;
    return comm.empty() ? nullptr : &comm.front();
}

namespace {

nlohmann::json fit_json(const CollectiveFit& f) {
    return {{"latency_s", f.latency_s}, {"bus_bytes_per_s", f.bus_bytes_per_s}};
}

template <typename T>
T field(const nlohmann::json& j, const char* key, const std::string& what) {
    ZT_CHECK(j.is_object() && j.contains(key), what, ": profile field \"", key,
             "\" missing; measure again with `zerotrain bench calibrate`");
    try {
        return j.at(key).get<T>();
    } catch (const nlohmann::json::exception& e) {
        ZT_FAIL(what, ": profile field \"", key, "\": ", e.what());
    }
}

CollectiveFit fit_from(const nlohmann::json& j, const char* key, const std::string& what) {
    const nlohmann::json f = field<nlohmann::json>(j, key, what);
    return {field<double>(f, "latency_s", what), field<double>(f, "bus_bytes_per_s", what), {}};
}

}  // namespace

nlohmann::json profile_json(const MachineProfile& p) {
    nlohmann::json j;
    j["version"] = MachineProfile::kVersion;
    j["identity"] = p.identity;
    j["machine"] = p.machine;
    j["measured_at"] = p.measured_at;
    j["seconds"] = p.seconds;
    j["rates"] = nlohmann::json::array();
    for (const ThreadRates& r : p.rates)
        j["rates"].push_back(
            {{"threads", r.threads},
             {"gemm_flops",
              {{"f32", {{"small", r.gemm_flops[0][0]}, {"large", r.gemm_flops[0][1]}}},
               {"bf16", {{"small", r.gemm_flops[1][0]}, {"large", r.gemm_flops[1][1]}}}}},
             {"attention_flops", r.attention_flops},
             {"elementwise_bytes_per_s", r.elementwise_bytes_per_s},
             {"op_overhead_s", r.op_overhead_s},
             {"team_region_s", r.team_region_s},
             {"team_min_elems", r.team_min_elems},
             {"speed_ref_s", r.speed_ref_s}});
    j["comm"] = nlohmann::json::array();
    for (const CommProfile& c : p.comm)
        j["comm"].push_back({{"backend", c.backend},
                             {"ranks", c.ranks},
                             {"all_reduce", fit_json(c.all_reduce)},
                             {"reduce_scatter", fit_json(c.reduce_scatter)},
                             {"all_gather", fit_json(c.all_gather)},
                             {"send_recv", fit_json(c.send_recv)},
                             {"rendezvous_s", c.rendezvous_s},
                             {"points", c.points}});
    j["disk"] = {{"dir", p.disk_dir},
                 {"write_bytes_per_s", p.disk_write_bytes_per_s},
                 {"read_bytes_per_s", p.disk_read_bytes_per_s},
                 {"mixed_bytes_per_s", p.disk_mixed_bytes_per_s},
                 {"direct", p.disk_direct}};
    j["shape_s"] = p.shape_s;
    j["shape_ref_s"] = p.shape_ref_s;
    if (!p.rank_speeds.empty()) j["rank_speeds"] = p.rank_speeds;
    return j;
}

MachineProfile profile_from_json(const nlohmann::json& j, const std::string& what) {
    const int version = field<int>(j, "version", what);
    ZT_CHECK(version == MachineProfile::kVersion, what, ": profile version ", version,
             ", this zerotrain reads version ", MachineProfile::kVersion,
             "; measure again with `zerotrain bench calibrate`");
    MachineProfile p;
    p.identity = field<std::string>(j, "identity", what);
    p.machine = j.value("machine", nlohmann::json::object());
    p.measured_at = j.value("measured_at", "");
    p.seconds = j.value("seconds", 0.0);
    for (const nlohmann::json& r : field<nlohmann::json>(j, "rates", what)) {
        ThreadRates t;
        t.threads = field<int>(r, "threads", what);
        const nlohmann::json g = field<nlohmann::json>(r, "gemm_flops", what);
        const char* dts[2] = {"f32", "bf16"};
        for (int d = 0; d < 2; ++d) {
            const nlohmann::json gd = field<nlohmann::json>(g, dts[d], what);
            t.gemm_flops[d][0] = field<double>(gd, "small", what);
            t.gemm_flops[d][1] = field<double>(gd, "large", what);
        }
        t.attention_flops = field<double>(r, "attention_flops", what);
        t.elementwise_bytes_per_s = field<double>(r, "elementwise_bytes_per_s", what);
        t.op_overhead_s = r.value("op_overhead_s", 0.0);
        t.team_region_s = r.value("team_region_s", 0.0);
        t.team_min_elems = r.value("team_min_elems", 0.0);
        t.speed_ref_s = r.value("speed_ref_s", 0.0);  // optional: profiles before session 30
        ZT_CHECK(t.team_region_s >= 0 && t.team_min_elems >= 0 && t.speed_ref_s >= 0, what,
                 ": profile rates at ", t.threads,
                 " threads: the team's costs or the speed reference are negative");
        ZT_CHECK(t.threads >= 1 && t.gemm_flops[0][1] > 0 && t.elementwise_bytes_per_s > 0, what,
                 ": profile rates at ", t.threads, " threads are not positive");
        p.rates.push_back(t);
    }
    ZT_CHECK(!p.rates.empty(), what, ": profile has no rates");
    std::sort(p.rates.begin(), p.rates.end(),
              [](const ThreadRates& a, const ThreadRates& b) { return a.threads < b.threads; });
    for (const nlohmann::json& c : j.value("comm", nlohmann::json::array())) {
        CommProfile cp;
        cp.backend = field<std::string>(c, "backend", what);
        cp.ranks = field<int>(c, "ranks", what);
        cp.all_reduce = fit_from(c, "all_reduce", what);
        cp.reduce_scatter = fit_from(c, "reduce_scatter", what);
        cp.all_gather = fit_from(c, "all_gather", what);
        cp.send_recv = fit_from(c, "send_recv", what);
        cp.points = c.value("points", nlohmann::json::object());
        cp.rendezvous_s = c.value("rendezvous_s", -1.0);  // optional: profiles before session 29
        cp.fit_points(what);
        p.comm.push_back(cp);
    }
    const nlohmann::json disk = j.value("disk", nlohmann::json::object());
    p.disk_dir = disk.value("dir", "");
    p.disk_write_bytes_per_s = disk.value("write_bytes_per_s", 0.0);
    p.disk_read_bytes_per_s = disk.value("read_bytes_per_s", 0.0);
    p.disk_mixed_bytes_per_s = disk.value("mixed_bytes_per_s", 0.0);
    p.disk_direct = disk.value("direct", false);
    if (j.contains("rank_speeds")) {
        ZT_CHECK(j["rank_speeds"].is_array(), what, ": \"rank_speeds\" is not an array");
        for (const auto& v : j["rank_speeds"]) {
            ZT_CHECK(v.is_number() && v.get<double>() > 0 && v.get<double>() <= 1, what,
                     ": rank_speeds holds ", v.dump(), ", not a speed in (0, 1]");
            p.rank_speeds.push_back(v.get<double>());
        }
    }
    if (j.contains("shape_s")) {
        ZT_CHECK(j["shape_s"].is_object(), what, ": \"shape_s\" is not an object of seconds");
        for (const auto& [k, v] : j["shape_s"].items()) {
            ZT_CHECK(v.is_number() && v.get<double>() > 0, what, ": shape_s[\"", k,
                     "\"] is not a positive number of seconds");
            p.shape_s[k] = v.get<double>();
        }
    }
    if (j.contains("shape_ref_s")) {  // optional: profiles before session 30
        ZT_CHECK(j["shape_ref_s"].is_object(), what,
                 ": \"shape_ref_s\" is not an object of seconds");
        for (const auto& [k, v] : j["shape_ref_s"].items()) {
            ZT_CHECK(v.is_number() && v.get<double>() > 0, what, ": shape_ref_s[\"", k,
                     "\"] is not a positive number of seconds");
            p.shape_ref_s[k] = v.get<double>();
        }
    }
    return p;
}

std::string profile_identity() {
    return str_cat("zt-profile-", MachineProfile::kVersion, "; ", gemm_machine_key(0), "; cores ",
                   std::max(1u, std::thread::hardware_concurrency()));
}

std::string default_profile_path() {
    const std::string dir = default_gemm_cache_dir();
    if (dir.empty()) return "";
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016" PRIx64, hash_string(profile_identity()));
    return dir + "/profile-" + hex + ".json";
}

void save_profile(const MachineProfile& p, const std::string& path) {
    const std::filesystem::path f(path);
    std::error_code ec;
    if (f.has_parent_path()) std::filesystem::create_directories(f.parent_path(), ec);
    // A name of its own per writer: plans and runs may save the same profile at once (the
    // last rename wins, whole).
    const std::string tmp = str_cat(path, ".tmp.", ::getpid(), ".",
                                    std::hash<std::thread::id>{}(std::this_thread::get_id()));
    {
        std::ofstream out(tmp);
        ZT_CHECK(out.good(), "calibrate: cannot write ", tmp);
        out << profile_json(p).dump(2) << "\n";
        ZT_CHECK(out.good(), "calibrate: writing ", tmp, " failed");
    }
    std::filesystem::rename(tmp, path, ec);
    ZT_CHECK(!ec, "calibrate: cannot rename ", tmp, " to ", path, ": ", ec.message());
}

std::optional<MachineProfile> load_profile(const std::string& path) {
    std::ifstream in(path);
    if (!in.good()) return std::nullopt;
    nlohmann::json j;
    try {
        in >> j;
    } catch (const nlohmann::json::exception& e) {
        ZT_FAIL(path, ": not a calibration profile (", e.what(),
                "); measure again with `zerotrain bench calibrate`");
    }
    return profile_from_json(j, path);
}

}  // namespace zt
