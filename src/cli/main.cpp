// zerotrain command line. The only place errors become exit codes: 2 for bad input (zt::Error of
// kind kInput, CLI usage errors), 1 for failures.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "util/error.h"
#include "util/log.h"

int main(int argc, char** argv) {
    CLI::App app{"zerotrain: a C++ engine for training large models past the memory wall"};
    app.set_version_flag("--version", std::string("zerotrain ") + ZT_VERSION);
    app.require_subcommand(1);
    zt::cli::Commands commands;
    commands.add_to(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        int rc = app.exit(e);
        return rc == 0 ? 0 : 2;
    }
    try {
        return commands.run();
    } catch (const zt::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.message().c_str());
        return e.kind() == zt::ErrorKind::kInput ? 2 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
