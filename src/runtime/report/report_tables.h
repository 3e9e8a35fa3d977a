// The tables and text sections of the run report (html_report.cpp draws the plots): summary,
// errors, communication per collective, restarts, configuration, unreadable lines. Each returns
// an HTML fragment with its own <h2>; values are escaped.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/report/run_log.h"

namespace zt::report {

// Per collective kind, summed over the run's step lines (rank 0's communicator).
using CommTotals = std::map<std::string, CommKindRecord>;
CommTotals comm_totals(const RunLog& log);

// A <table> with a header row; id may be empty.
std::string html_table(const std::vector<std::string>& header,
                       const std::vector<std::vector<std::string>>& rows, const std::string& id);

std::string summary_table(const RunLog& log);
std::string errors_section(const RunLog& log);
std::string comm_table(const CommTotals& totals);
std::string restarts_section(const std::optional<std::vector<RestartRecord>>& restarts);
std::string config_section(const std::optional<nlohmann::json>& config);
std::string problems_section(const std::vector<LogProblem>& problems);

}  // namespace zt::report
