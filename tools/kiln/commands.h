// Subcommands of the `kiln` command line. Each takes its arguments (after the subcommand
// name) and returns the process exit code.
#pragma once

#include <string>
#include <vector>

namespace kiln::tools {

int CheckCommand(const std::vector<std::string>& args);
int RunCommand(const std::vector<std::string>& args);
int CompileCommand(const std::vector<std::string>& args);
int BenchCommand(const std::vector<std::string>& args);
int DevicesCommand(const std::vector<std::string>& args);

}  // namespace kiln::tools
