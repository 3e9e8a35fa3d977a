// The small text files of a checkpoint, sealed by a CRC-32C over every byte (Note [Sealed
// manifest]): manifest.json carries its own checksum as a field, `latest` as a second word, so a
// changed byte anywhere is detected before any of the file is used, and both stay readable (the
// manifest is still plain JSON). Shards are covered by the CRC-32C the manifest records.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace zt {

constexpr const char* kManifestChecksumKey = "manifest_crc32c";

// The text of manifest.json for `j` (an object without kManifestChecksumKey): j.dump(1) with the
// checksum field added, ending in a newline.
std::string seal_manifest_text(const nlohmann::json& j);

// Checks the checksum of a manifest's text, then parses it; returns the object without the
// checksum field. A text without the field is accepted only as a format version 1 manifest
// (written before manifests were sealed). Throws zt::Error (kInput) naming `where` and the fault.
nlohmann::json open_manifest_text(const std::string& text, const std::string& where);

// The text of `latest` naming checkpoint `name`: "step_00000020 crc32c:1a2b3c4d\n".
std::string seal_latest_text(const std::string& name);

// The checkpoint a `latest` text names, or nothing (with the reason in `why`) when its checksum
// does not match or it is malformed. The unsealed form of older versions ("step_00000020\n")
// is accepted.
std::optional<std::string> open_latest_text(const std::string& text, std::string* why = nullptr);

}  // namespace zt
