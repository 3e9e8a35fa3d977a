// Config files and overrides: JSON text with line and column in errors, duplicate keys refused,
// and `--set a.b=v` applied to the parsed tree.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "runtime/config.h"
#include "util/config_section.h"

namespace zt {

using config_detail::show;
using nlohmann::json;

namespace {

std::pair<size_t, size_t> line_column(const std::string& text, size_t byte) {
    size_t line = 1, column = 1;
    for (size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
        if (text[i] == '\n') {
            ++line;
            column = 1;
        } else {
            ++column;
        }
    }
    return {line, column};
}

// Parses `text`; a syntax error names the file, line and column. A duplicate key is an error too,
// as in DeepSpeed (a JSON parser would keep one of the two silently).
json parse_json_text(const std::string& text, const std::string& path) {
    struct Frame {
        std::string path;
        bool is_object;
        std::set<std::string> keys;
        std::string last_key;
    };
    std::vector<Frame> stack;
    auto on_event = [&](int, json::parse_event_t event, json& parsed) {
        using E = json::parse_event_t;
        if (event == E::object_start || event == E::array_start) {
            std::string where;
            if (!stack.empty()) {
                const Frame& up = stack.back();
                where = up.is_object ? (up.path.empty() ? up.last_key : up.path + "." + up.last_key)
                                     : up.path + "[]";
            }
            stack.push_back({where, event == E::object_start, {}, {}});
        } else if (event == E::object_end || event == E::array_end) {
            stack.pop_back();
        } else if (event == E::key && !stack.empty()) {
            Frame& f = stack.back();
            f.last_key = parsed.get<std::string>();
            const std::string name = f.path.empty() ? f.last_key : f.path + "." + f.last_key;
            ZT_CHECK(f.keys.insert(f.last_key).second, path, ": duplicate key \"", name,
                     "\"; give each key once");
        }
        return true;
    };
    try {
        return json::parse(text, on_event);
    } catch (const json::parse_error& e) {
        const auto [line, column] = line_column(text, e.byte);
        std::string why = e.what();
        const size_t at = why.find(": ", why.find("parse error"));
        if (at != std::string::npos) why = why.substr(at + 2);
        ZT_FAIL(path, ": malformed JSON at line ", line, ", column ", column, " (byte ", e.byte,
                "): ", why);
    }
}

}  // namespace

void apply_override(json& j, const std::string& assignment) {
    const size_t eq = assignment.find('=');
    ZT_CHECK(eq != std::string::npos, "--set ", assignment,
             ": expected KEY=VALUE (for example zero_optimization.stage=0), got no '='");
    const std::string path = assignment.substr(0, eq);
    const std::string text = assignment.substr(eq + 1);
    ZT_CHECK(!path.empty(), "--set ", assignment, ": expected a dotted key before '='");
    std::vector<std::string> parts;
    for (size_t start = 0;;) {
        const size_t dot = path.find('.', start);
        parts.push_back(path.substr(start, dot == std::string::npos ? dot : dot - start));
        ZT_CHECK(!parts.back().empty(), "--set ", path, ": empty key segment in the dotted path");
        if (dot == std::string::npos) break;
        start = dot + 1;
    }
    if (j.is_null()) j = json::object();
    ZT_CHECK(j.is_object(), "--set ", path, ": the config is not a JSON object");
    json* node = &j;
    std::string walked;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
        walked += (i ? "." : "") + parts[i];
        json& next = (*node)[parts[i]];
        if (next.is_null()) next = json::object();  // only missing nodes are created
        ZT_CHECK(next.is_object(), "--set ", path, ": ", walked, " is ", show(next),
                 ", not an object, so it cannot hold a key");
        node = &next;
    }
    json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
    (*node)[parts.back()] = value.is_discarded() ? json(text) : std::move(value);
}

json load_config_file(const std::string& path) {
    std::error_code ec;
    ZT_CHECK(!std::filesystem::is_directory(path, ec), path,
             ": expected a config file, got a directory");
    std::ifstream in(path, std::ios::binary);
    ZT_CHECK(in, path, ": cannot open the config file (", std::strerror(errno), ")");
    std::ostringstream buf;
    buf << in.rdbuf();
    const std::string text = buf.str();
    return parse_json_text(text, path);
}

}  // namespace zt
