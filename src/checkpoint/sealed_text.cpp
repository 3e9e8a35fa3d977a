#include "checkpoint/sealed_text.h"

#include <cstdio>
#include <regex>

#include "util/crc32c.h"
#include "util/error.h"

// Note [Sealed manifest]
// manifest.json is written as j.dump(1) with the field "manifest_crc32c": "XXXXXXXX" (8 lowercase
// hex digits) among the others; the checksum is the CRC-32C of the file's bytes with those 8
// digits replaced by "00000000". A reader finds the field in the raw bytes (it must occur exactly
// once), recomputes the CRC the same way and compares before it parses anything, so every byte of
// the file is covered: the field's own name and digits included (a damaged name leaves no field,
// which only a format version 1 manifest may lack, and version 1 manifests do not carry the
// field; damaged digits do not match). Nothing depends on JSON formatting being canonical:
// whitespace or a number's spelling is covered like any other byte.

namespace zt {

namespace {

using json = nlohmann::json;

constexpr const char* kZeroDigits = "00000000";

std::string field_prefix() { return str_cat("\"", kManifestChecksumKey, "\": \""); }

std::string hex8(uint32_t v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", v);
    return buf;
}

bool parse_hex8(const std::string& s, uint32_t* out) {
    if (s.size() != 8) return false;
    uint32_t v = 0;
    for (char c : s) {
        int d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else
            return false;
        v = v * 16 + static_cast<uint32_t>(d);
    }
    *out = v;
    return true;
}

}  // namespace

std::string seal_manifest_text(const json& j) {
    ZT_ASSERT(j.is_object() && !j.contains(kManifestChecksumKey));
    json k = j;
    k[kManifestChecksumKey] = kZeroDigits;
    std::string text = k.dump(1) + "\n";
    const std::string prefix = field_prefix();
    const size_t at = text.find(prefix);
    ZT_ASSERT(at != std::string::npos && text.find(prefix, at + 1) == std::string::npos);
    const std::string digits = hex8(crc32c(text.data(), text.size()));
    text.replace(at + prefix.size(), 8, digits);
    return text;
}

json open_manifest_text(const std::string& text, const std::string& where) {
    const std::string prefix = field_prefix();
    const size_t at = text.find(prefix);
    if (at == std::string::npos) {
        // No checksum: only a format version 1 manifest may lack one.
        json j = json::parse(text, nullptr, false);
        ZT_CHECK(!j.is_discarded(), where, ": not valid JSON (a truncated or corrupted manifest?)");
        ZT_CHECK(j.is_object() && j.value("format_version", json()) == json(1) &&
                     !j.contains(kManifestChecksumKey),
                 where, ": no \"", kManifestChecksumKey,
                 "\" field (a corrupted manifest; every manifest after format version 1 has one)");
        return j;
    }
    ZT_CHECK(text.find(prefix, at + 1) == std::string::npos, where, ": \"",
             kManifestChecksumKey, "\" occurs twice (a corrupted manifest)");
    const size_t digits_at = at + prefix.size();
    uint32_t recorded = 0;
    ZT_CHECK(digits_at + 9 <= text.size() && text[digits_at + 8] == '"' &&
                 parse_hex8(text.substr(digits_at, 8), &recorded),
             where, ": \"", kManifestChecksumKey,
             "\" is not 8 lowercase hex digits (a corrupted manifest)");
    std::string zeroed = text;
    zeroed.replace(digits_at, 8, kZeroDigits);
    const uint32_t actual = crc32c(zeroed.data(), zeroed.size());
    json j = json::parse(text, nullptr, false);
    ZT_CHECK(actual == recorded, where, ": checksum mismatch (CRC-32C ", hex8(actual),
             ", the manifest records ", hex8(recorded), "): ",
             j.is_discarded() ? "not valid JSON (a truncated or corrupted manifest?)"
                              : "the manifest was changed or corrupted after it was written");
    ZT_CHECK(!j.is_discarded(), where, ": not valid JSON (a truncated or corrupted manifest?)");
    ZT_CHECK(j.is_object() && j.contains(kManifestChecksumKey) &&
                 j[kManifestChecksumKey] == json(hex8(recorded)),
             where, ": \"", kManifestChecksumKey, "\" is not a top-level field");
    j.erase(kManifestChecksumKey);
    return j;
}

std::string seal_latest_text(const std::string& name) {
    return str_cat(name, " crc32c:", hex8(crc32c(name.data(), name.size())), "\n");
}

std::optional<std::string> open_latest_text(const std::string& text, std::string* why) {
    static const std::regex kSealed("(step_[0-9]{8,}) crc32c:([0-9a-f]{8})\n?");
    static const std::regex kLegacy("(step_[0-9]{8,})\n?");
    std::smatch m;
    if (std::regex_match(text, m, kLegacy)) return m[1].str();
    uint32_t recorded = 0;
    if (!std::regex_match(text, m, kSealed) || !parse_hex8(m[2].str(), &recorded)) {
        if (why) *why = "malformed (expected \"step_NNNNNNNN crc32c:XXXXXXXX\")";
        return std::nullopt;
    }
    const std::string name = m[1].str();
    if (crc32c(name.data(), name.size()) != recorded) {
        if (why) *why = str_cat("checksum mismatch (it names ", name, ")");
        return std::nullopt;
    }
    return name;
}

}  // namespace zt
