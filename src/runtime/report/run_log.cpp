#include "runtime/report/run_log.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "tensor/memory.h"
#include "util/error.h"

namespace zt::report {

namespace {

using nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double number(const json& j, const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_number() ? it->get<double>() : kNaN;
}

int64_t integer(const json& j, const char* key, int64_t def) {
    auto it = j.find(key);
    return it != j.end() && it->is_number() ? static_cast<int64_t>(it->get<double>()) : def;
}

std::map<std::string, int64_t> byte_map(const json& j) {
    std::map<std::string, int64_t> m;
    if (!j.is_object()) return m;
    for (auto it = j.begin(); it != j.end(); ++it)
        if (it->is_number()) m[it.key()] = static_cast<int64_t>(it->get<double>());
    return m;
}

std::string text(const json& j, const char* key) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return "";
    return it->is_string() ? it->get<std::string>() : it->dump();
}

CompressionRecord compression_record(const json& j) {
    CompressionRecord c;
    c.codec = text(j, "codec");
    if (j.contains("forward") || j.contains("backward"))
        c.codec = "forward " + text(j, "forward") + ", backward " + text(j, "backward");
    if (auto ef = j.find("error_feedback"); ef != j.end() && ef->is_boolean() && ef->get<bool>())
        c.codec += ", error feedback";
    if (std::string phase = text(j, "phase"); !phase.empty()) c.codec += " (" + phase + ")";
    c.raw_bytes = number(j, "raw_bytes");
    c.wire_bytes = number(j, "wire_bytes");
    c.ratio = number(j, "ratio");
    c.relative_error = number(j, "relative_error");
    return c;
}

StepRecord step_record(const json& j) {
    StepRecord r;
    r.step = integer(j, "step", 0);
    r.loss = number(j, "loss");
    r.lr = number(j, "lr");
    r.grad_norm = number(j, "grad_norm");
    r.step_time_s = number(j, "step_time_s");
    r.tokens_per_s = number(j, "tokens_per_s");
    if (std::isnan(r.tokens_per_s)) r.tokens_per_s = number(j, "samples_per_s");
    if (j.contains("data") && j["data"].is_object() && j["data"].contains("unique_ids") &&
        j["data"]["unique_ids"].is_array())
        for (const json& e : j["data"]["unique_ids"])
            r.unique_ids.push_back(e.is_number() ? e.get<double>() : NAN);
    if (auto e = j.find("embedding"); e != j.end() && e->is_object()) {
        r.alltoall_bytes = number(*e, "alltoall_bytes");
        r.alltoall_s = number(*e, "alltoall_s");
        if (auto t = e->find("rows_touched"); t != e->end() && t->is_object())
            for (auto it = t->begin(); it != t->end(); ++it)
                if (it->is_number()) r.table_rows[it.key()] = it->get<double>();
    }
    if (auto c = j.find("compression"); c != j.end() && c->is_object())
        for (auto it = c->begin(); it != c->end(); ++it)
            if (it->is_object()) r.compression[it.key()] = compression_record(*it);
    for (const char* owner : {"embedding", "pipeline"})
        if (auto o = j.find(owner); o != j.end() && o->is_object())
            if (auto c = o->find("comm_compression"); c != o->end() && c->is_object())
                r.compression[owner] = compression_record(*c);
    r.cross_host_bytes = number(j, "comm_cross_host_bytes");
    if (auto p = j.find("plan"); p != j.end() && p->is_object()) {
        if (auto t = p->find("step_s"); t != p->end() && t->is_object())
            r.plan_step_s = number(*t, "predicted");
        if (auto b = p->find("peak_bytes"); b != p->end() && b->is_object())
            r.plan_peak_bytes = number(*b, "predicted");
    }
    r.mfu_flops_per_s = number(j, "mfu_flops_per_s");
    r.comm_s = number(j, "comm_s");
    r.loss_scale = number(j, "loss_scale");
    r.mfu = number(j, "mfu");
    if (j.contains("stragglers") && j["stragglers"].is_array())
        for (const json& e : j["stragglers"])
            if (e.is_number()) r.stragglers.push_back(static_cast<int64_t>(e.get<double>()));
    auto sk = j.find("skipped");
    r.skipped = sk != j.end() && sk->is_boolean() && sk->get<bool>();
    if (j.contains("mem")) r.mem = byte_map(j["mem"]);
    if (j.contains("comm") && j["comm"].is_object())
        for (auto it = j["comm"].begin(); it != j["comm"].end(); ++it)
            if (it->is_object())
                r.comm[it.key()] = {
                    integer(*it, "count", 0), integer(*it, "bytes", 0),
                    std::isnan(number(*it, "seconds")) ? 0 : number(*it, "seconds")};
    if (j.contains("ranks") && j["ranks"].is_array())
        for (const json& e : j["ranks"])
            if (e.is_object())
                r.ranks.push_back(
                    {integer(e, "rank", static_cast<int64_t>(r.ranks.size())),
                     std::isnan(number(e, "comm_s")) ? 0 : number(e, "comm_s"), number(e, "step_s"),
                     number(e, "compute_s"), number(e, "io_s"),
                     e.contains("mem") ? byte_map(e["mem"]) : std::map<std::string, int64_t>{}});
    return r;
}

}  // namespace

std::vector<std::string> memory_categories() {
    std::vector<std::string> c;
    for (int i = 0; i < kMemCategoryCount; ++i)
        c.push_back(mem_category_name(static_cast<MemCategory>(i)));
    return c;
}

RunLog parse_metrics(std::istream& in, const std::string& file_name) {
    RunLog log;
    std::string line;
    int64_t n = 0;
    while (std::getline(in, line)) {
        ++n;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        json j = json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object()) {
            log.problems.push_back({file_name, n, "not a JSON object (a line cut short?)"});
            continue;
        }
        if (j.contains("error")) {
            log.errors.push_back({integer(j, "step", -1), text(j, "error")});
        } else if (j.contains("eval_loss")) {
            const double v = number(j, "eval_loss");
            if (std::isnan(v))
                log.problems.push_back({file_name, n, "eval_loss is not a number"});
            else {
                EvalRecord e{integer(j, "step", 0), v, {}};
                for (auto it = j.begin(); it != j.end(); ++it)
                    if (it.key() != "eval_loss" && it.key().rfind("eval_", 0) == 0 &&
                        it->is_number())
                        e.extra[it.key()] = it->get<double>();
                log.evals.push_back(e);
            }
        } else if (j.contains("step") && j["step"].is_number()) {
            log.steps.push_back(step_record(j));
            log.samples = log.samples || j.contains("samples_per_s");
        } else {
            log.problems.push_back({file_name, n, "neither a step, an eval nor an error line"});
        }
    }
    return log;
}

std::vector<RestartRecord> parse_restarts(std::istream& in, std::vector<LogProblem>* problems,
                                          const std::string& file_name) {
    std::vector<RestartRecord> out;
    std::string line;
    int64_t n = 0;
    while (std::getline(in, line)) {
        ++n;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        json j = json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object()) {
            if (problems) problems->push_back({file_name, n, "not a JSON object"});
            continue;
        }
        auto or_dash = [](std::string s) { return s.empty() ? std::string("-") : s; };
        out.push_back({text(j, "time"), text(j, "attempt"), text(j, "cause"),
                       or_dash(text(j, "resumed_from")), or_dash(text(j, "recovery_s"))});
    }
    return out;
}

RunDirContents read_run_dir(const std::string& dir) {
    RunDirContents c;
    c.dir = dir;
    const std::string metrics = dir + "/metrics.jsonl";
    std::ifstream in(metrics);
    ZT_CHECK(in.good(), "report: cannot read ", metrics,
             "; expected a run directory that `zerotrain train --run-dir` wrote");
    c.log = parse_metrics(in);
    if (std::ifstream cf(dir + "/config.json"); cf.good()) {
        json j = json::parse(cf, nullptr, false);
        if (j.is_object())
            c.config = std::move(j);
        else
            c.log.problems.push_back({"config.json", 0, "not a JSON object"});
    }
    if (std::ifstream rf(dir + "/restarts.jsonl"); rf.good())
        c.restarts = parse_restarts(rf, &c.log.problems);
    return c;
}

}  // namespace zt::report
