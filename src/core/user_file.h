// Files the user names on the command line (prompt files, --chat conversations, --requests, traces,
// --hot-set, ...): one place that checks them, so a missing file, a directory or an unreadable
// file is a nitro::Error naming the flag and the path, never a std::ios_base::failure from a
// stream (libstdc++ throws one when it reads a directory) or a silent empty read.
#pragma once

#include <fstream>
#include <string>
#include <string_view>

namespace nitro {

/// Throws nitro::Error unless `path` names something that can be read as a file: it must exist,
/// be readable and not be a directory (a regular file, or a pipe / character device such as
/// /dev/stdin or bash's <(...)). `what` says which input it is, e.g. "--chat" or "prompt file";
/// the message reads "WHAT 'PATH' is a directory, not a file" (or "...: cannot open: REASON").
void check_user_file(const std::string& path, std::string_view what);

/// The whole content of a user-named file (check_user_file first; a failed read is a nitro::Error
/// naming the path too).
std::string read_user_file(const std::string& path, std::string_view what);

/// The file opened for streaming (large JSON Lines inputs), after check_user_file.
std::ifstream open_user_file(const std::string& path, std::string_view what, std::ios::openmode mode = std::ios::in);

}  // namespace nitro
