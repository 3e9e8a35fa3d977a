// Reading one JSON object of a config: typed getters that name the dotted key in every error, and
// bookkeeping of the keys consumed, so that what is left over is reported as unknown (config.cpp).
// A getter's error is recorded, not thrown (Note [Config errors]), so one parse reports them all.
#pragma once

#include <cmath>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "util/error.h"

namespace zt::config_detail {

using nlohmann::json;

// A value as messages show it: its JSON text, cut short.
inline std::string show(const json& v) {
    std::string s = v.dump();
    return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

inline bool is_auto(const json& v) {
    return v.is_string() && v.get_ref<const std::string&>() == "auto";
}

[[noreturn]] inline void fail_type(const std::string& key, const std::string& expected,
                                   const json& v) {
    if (is_auto(v)) ZT_FAIL(key, ": \"auto\" cannot be resolved here; give ", expected);
    ZT_FAIL(key, ": expected ", expected, ", got ", show(v));
}

// An integer; a float with an integral value (5e8, as DeepSpeed configs write sizes) counts.
inline int64_t as_int(const json& v, const std::string& key) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX})
        fail_type(key, "an integer below 2^63", v);
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
        const double d = v.get<double>();
        if (std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 9.2e18)
            return static_cast<int64_t>(d);
    }
    fail_type(key, "an integer", v);
}

inline double as_number(const json& v, const std::string& key) {
    if (!v.is_number()) fail_type(key, "a number", v);
    return v.get<double>();
}

inline bool as_bool(const json& v, const std::string& key) {
    if (!v.is_boolean()) fail_type(key, "true or false", v);
    return v.get<bool>();
}

inline std::string as_string(const json& v, const std::string& key) {
    if (!v.is_string()) fail_type(key, "a string", v);
    return v.get<std::string>();
}

// Note [Config sections]: one JSON object of the config and its dotted path. Every read marks the
// key as known; finish() reports the keys nobody read as unknown, by dotted path. A null value
// reads as absent. Readers take a default (used when absent) and an inclusive range.
//
// Note [Config errors]: a user fixes a config in one round, so parse_config reports every error
// at once. A reader whose value is wrong records the error (naming the key) in `errors` and
// returns its default, so parsing goes on; guard() does the same for any check that throws
// zt::Error (kInput). parse_config throws one zt::Error listing them all at the end.
class Section {
  public:
    Section(const json& obj, std::string path, std::vector<std::string>& warnings,
            std::vector<std::string>& errors)
        : obj_(obj), path_(std::move(path)), warnings_(warnings), errors_(errors) {}

    // Runs f(); a zt::Error of kind kInput it throws is recorded instead. False when it threw.
    template <typename F>
    bool guard(F&& f) {
        try {
            f();
            return true;
        } catch (const Error& e) {
            if (e.kind() != ErrorKind::kInput) throw;
            errors_.push_back(e.message());
            return false;
        }
    }
    // The errors recorded so far (of the whole config, not only this section).
    size_t error_count() const { return errors_.size(); }

    std::string key(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }
    bool empty() const { return obj_.empty(); }
    bool has(const std::string& k) const {
        auto it = obj_.find(k);
        return it != obj_.end() && !it->is_null();
    }
    bool is_auto(const std::string& k) const {
        return has(k) && config_detail::is_auto(obj_.at(k));
    }

    // The value at k, now known; nullptr when absent or null.
    const json* take(const std::string& k) {
        used_.insert(k);
        auto it = obj_.find(k);
        return it == obj_.end() || it->is_null() ? nullptr : &*it;
    }
    void take_all() {
        for (auto it = obj_.begin(); it != obj_.end(); ++it) used_.insert(it.key());
    }
    // A value that is not an object is recorded as an error; the section then reads as empty.
    Section section(const std::string& k) {
        const json* v = take(k);
        if (v && !v->is_object() && !guard([&] { fail_type(key(k), "an object", *v); }))
            v = nullptr;
        return Section(v ? *v : empty_object(), key(k), warnings_, errors_);
    }

    // Each reader records a wrong value (Note [Config errors]) and returns def for it.
    int64_t get_int(const std::string& k, int64_t def, int64_t lo, int64_t hi = INT64_MAX) {
        const json* v = take(k);
        int64_t n = def;
        if (!v) return def;
        guard([&] {
            n = as_int(*v, key(k));
            if (n < lo || n > hi)
                fail_type(key(k),
                          hi == INT64_MAX ? str_cat("an integer >= ", lo)
                                          : str_cat("an integer in [", lo, ", ", hi, "]"),
                          *v);
        });
        return n < lo || n > hi ? def : n;
    }
    double get_number(const std::string& k, double def, double lo = -HUGE_VAL,
                      double hi = HUGE_VAL) {
        const json* v = take(k);
        double x = def;
        if (!v) return def;
        const bool ok = guard([&] {
            x = as_number(*v, key(k));
            if (x < lo || x > hi)
                fail_type(key(k),
                          hi == HUGE_VAL ? str_cat("a number >= ", lo)
                                         : str_cat("a number in [", lo, ", ", hi, "]"),
                          *v);
        });
        return ok ? x : def;
    }
    bool get_bool(const std::string& k, bool def) {
        const json* v = take(k);
        bool b = def;
        if (v) guard([&] { b = as_bool(*v, key(k)); });
        return b;
    }
    std::string get_string(const std::string& k, const std::string& def) {
        const json* v = take(k);
        std::string s = def;
        if (v) guard([&] { s = as_string(*v, key(k)); });
        return s;
    }
    std::string get_choice(const std::string& k, const std::string& def,
                           std::initializer_list<const char*> choices) {
        const size_t before = error_count();
        const std::string s = get_string(k, def);
        if (error_count() != before) return def;
        std::string list;
        for (const char* c : choices) {
            if (s == c) return s;
            list += list.empty() ? "" : ", ";
            list += str_cat("\"", c, "\"");
        }
        guard([&] {
            fail_type(key(k), choices.size() == 1 ? list : "one of " + list, obj_.at(k));
        });
        return def;
    }

    // A list of integers, each >= lo; a wrong value records an error and returns {}.
    std::vector<int64_t> get_int_list(const std::string& k, int64_t lo) {
        const json* v = take(k);
        std::vector<int64_t> out;
        if (!v) return out;
        const bool ok = guard([&] {
            if (!v->is_array()) fail_type(key(k), "a list of integers", *v);
            for (size_t i = 0; i < v->size(); ++i) {
                const std::string ki = str_cat(key(k), "[", i, "]");
                const int64_t n = as_int((*v)[i], ki);
                if (n < lo) fail_type(ki, str_cat("an integer >= ", lo), (*v)[i]);
                out.push_back(n);
            }
        });
        if (!ok) out.clear();
        return out;
    }
    // A list of objects, each read as a section named "k[i]" (finish() each).
    std::vector<Section> section_list(const std::string& k) {
        const json* v = take(k);
        std::vector<Section> out;
        if (!v) return out;
        if (!v->is_array()) {
            guard([&] { fail_type(key(k), "a list of objects", *v); });
            return out;
        }
        for (size_t i = 0; i < v->size(); ++i) {
            const std::string ki = str_cat(key(k), "[", i, "]");
            if (!(*v)[i].is_object()) {
                guard([&] { fail_type(ki, "an object", (*v)[i]); });
                continue;
            }
            out.emplace_back((*v)[i], ki, warnings_, errors_);
        }
        return out;
    }

    // A DeepSpeed section with an "enabled" flag: accepted while it is off.
    void refuse_if_enabled(const std::string& k, const std::string& why) {
        Section s = section(k);
        guard([&] {
            ZT_CHECK(!s.get_bool("enabled", false), s.key("enabled"), ": ", why,
                     "; remove the section or set enabled to false");
        });
        s.take_all();  // the rest of a disabled section does nothing
    }
    // A section we cannot honour yet: accepted only when empty.
    void refuse_if_nonempty(const std::string& k, const std::string& why) {
        Section s = section(k);
        guard([&] { ZT_CHECK(s.empty(), key(k), ": ", why, "; remove the section"); });
    }

    void finish() {
        for (auto it = obj_.begin(); it != obj_.end(); ++it)
            if (!used_.count(it.key())) warnings_.push_back(key(it.key()) + ": unknown key, ignored");
    }

  private:
    static const json& empty_object() {
        static const json kEmpty = json::object();
        return kEmpty;
    }

    const json& obj_;
    std::string path_;
    std::vector<std::string>& warnings_;
    std::vector<std::string>& errors_;
    std::set<std::string> used_;
};

}  // namespace zt::config_detail
