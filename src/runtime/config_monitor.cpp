// Parsing of "monitor" (ours) and DeepSpeed's "tensorboard" and "csv_monitor" sections
// (docs/monitoring.md). The GEMM ceiling file of `zerotrain bench gemm --json` is read here, at
// parse time, so that every rank agrees on the config (a missing file fails every rank alike).
#include <arpa/inet.h>

#include <fstream>

#include "runtime/config.h"
#include "runtime/config_monitor.h"

namespace zt::config_detail {

namespace {

void parse_sink(Section& root, const char* name, MonitorSinkConfig& s) {
    Section sec = root.section(name);
    s.enabled = sec.get_bool("enabled", false);
    s.output_path = sec.get_string("output_path", "");
    s.job_name = sec.get_string("job_name", s.job_name);
    ZT_CHECK(!s.job_name.empty() && s.job_name.find('/') == std::string::npos, sec.key("job_name"),
             ": expected a non-empty name without '/', got \"", s.job_name, "\"");
    sec.finish();
}

// FLOP/s from a `zerotrain bench gemm --json` file: ceiling_gflops.bf16 for bf16 training,
// ceiling_gflops.f32 otherwise (fp16 GEMMs run as f32, tensor/gemm.cpp).
double read_gemm_ceiling(const std::string& path, const std::string& key,
                         const std::string& precision) {
    std::ifstream in(path);
    ZT_CHECK(in.good(), key, ": cannot read ", path,
             "; write it with `zerotrain bench gemm --json ", path, "`");
    const json j = json::parse(in, nullptr, false);
    const char* dt = precision == "bf16" ? "bf16" : "f32";
    ZT_CHECK(j.is_object() && j.contains("ceiling_gflops") && j["ceiling_gflops"].is_object() &&
                 j["ceiling_gflops"].contains(dt) && j["ceiling_gflops"][dt].is_number() &&
                 j["ceiling_gflops"][dt].get<double>() > 0,
             key, ": ", path, " holds no positive ceiling_gflops.", dt,
             "; expected the JSON that `zerotrain bench gemm --json FILE` writes");
    return j["ceiling_gflops"][dt].get<double>() * 1e9;
}

}  // namespace

void parse_monitor(Section& root, const std::string& precision, MonitorConfig& m) {
    parse_sink(root, "tensorboard", m.tensorboard);
    parse_sink(root, "csv_monitor", m.csv);
    Section s = root.section("monitor");
    m.straggler_factor = s.get_number("straggler_factor", m.straggler_factor, 1.0);
    ZT_CHECK(!(s.has("gemm_ceiling_flops") && s.has("gemm_ceiling_file")),
             s.key("gemm_ceiling_flops"), ": give either it or monitor.gemm_ceiling_file, not both");
    m.gemm_ceiling_flops = s.get_number("gemm_ceiling_flops", 0.0, 0.0);
    const std::string file = s.get_string("gemm_ceiling_file", "");
    if (!file.empty())
        m.gemm_ceiling_flops = read_gemm_ceiling(file, s.key("gemm_ceiling_file"), precision);
    Section p = s.section("prometheus");
    if (!p.empty()) {
        ZT_CHECK(p.has("port"), p.key("port"),
                 ": expected the TCP port to serve /metrics on (0: any free port), got nothing");
        m.prometheus_port = static_cast<int>(p.get_int("port", 0, 0, 65535));
        m.prometheus_address = p.get_string("address", m.prometheus_address);
        in_addr parsed{};
        ZT_CHECK(inet_pton(AF_INET, m.prometheus_address.c_str(), &parsed) == 1, p.key("address"),
                 ": expected an IPv4 address such as \"127.0.0.1\" or \"0.0.0.0\", got \"",
                 m.prometheus_address, "\"");
    }
    p.finish();
    s.finish();
}

}  // namespace zt::config_detail
