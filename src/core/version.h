// The version of this build: the project version and the git commit it was built from.
#pragma once

namespace nitro {

/// Project version, e.g. "0.1.0" (CMakeLists.txt project()).
const char* version();
/// Short git commit of the checkout at build time, "-dirty" appended when tracked files had
/// uncommitted changes, "unknown" outside a git checkout (cmake/git_version.cmake).
const char* git_commit();

}  // namespace nitro
