#include "runtime/checkpoint_state_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "checkpoint/durable_file.h"
#include "util/crc32c.h"
#include "util/error.h"

namespace zt {

std::map<std::string, std::string> stage_state_files(const StateFileSources& sources, Manifest& m) {
    std::map<std::string, std::string> out;
    for (const auto& [name, source] : sources) {
        std::string bytes = source();
        m.trainer["state_files"][name] = {{"bytes", bytes.size()},
                                          {"crc32c", crc32c(bytes.data(), bytes.size())}};
        out.emplace(name, std::move(bytes));
    }
    return out;
}

void write_state_files(const std::string& dir, const std::map<std::string, std::string>& files) {
    for (const auto& [name, bytes] : files) {
        const std::string path = dir + "/" + name;
        SysFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
        ZT_IO_CHECK(fd.fd >= 0, "checkpoint: cannot create ", path, ": ", std::strerror(errno));
        write_all(fd.fd, bytes.data(), bytes.size(), path);
        ZT_IO_CHECK(::fsync(fd.fd) == 0, "checkpoint: fsync of ", path,
                    " failed: ", std::strerror(errno));
    }
}

std::optional<std::string> read_state_file(const std::string& dir, const Manifest& m,
                                           const std::string& name) {
    const auto files = m.trainer.find("state_files");
    if (files == m.trainer.end() || !files->is_object() || !files->contains(name))
        return std::nullopt;
    const nlohmann::json& want = (*files)[name];
    const std::string path = dir + "/" + name;
    std::ifstream in(path, std::ios::binary);
    ZT_CHECK(in, "checkpoint: ", path, " is missing");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string bytes = ss.str();
    try {
        ZT_CHECK(bytes.size() == want.at("bytes").get<uint64_t>() &&
                     crc32c(bytes.data(), bytes.size()) == want.at("crc32c").get<uint32_t>(),
                 "checkpoint: ", path, " fails its size or CRC-32C check");
    } catch (const nlohmann::json::exception& e) {
        ZT_CHECK(false, "checkpoint: the manifest's entry of ", name, " is malformed: ", e.what());
    }
    return bytes;
}

}  // namespace zt
