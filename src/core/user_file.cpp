#include "core/user_file.h"

#include "core/error.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace nitro {

namespace {

std::string named(const std::string& path, std::string_view what) {
    return what.empty() ? fmt::format("'{}'", path) : fmt::format("{} '{}'", what, path);
}

}  // namespace

// Checked without opening: opening a pipe (bash's <(...)) to test it would be harmless, but a named
// FIFO without a writer would block here.
void check_user_file(const std::string& path, std::string_view what) {
    if (path.empty()) fail("{}: the file name is empty", what.empty() ? "input file" : what);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) fail("{}: cannot open: {}", named(path, what), std::strerror(errno));
    if (S_ISDIR(st.st_mode)) fail("{} is a directory, not a file", named(path, what));
    if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode))
        fail("{} is not a regular file", named(path, what));
    if (::access(path.c_str(), R_OK) != 0) fail("{}: cannot open: {}", named(path, what), std::strerror(errno));
}

std::string read_user_file(const std::string& path, std::string_view what) {
    check_user_file(path, what);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("{}: cannot open: {}", named(path, what), std::strerror(errno));
    std::string out;
    char buf[1 << 16];
    for (;;) {
        const ssize_t got = ::read(fd, buf, sizeof buf);
        if (got == 0) break;
        if (got < 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            ::close(fd);
            fail("{}: cannot read: {}", named(path, what), std::strerror(err));
        }
        out.append(buf, static_cast<size_t>(got));
    }
    ::close(fd);
    return out;
}

std::ifstream open_user_file(const std::string& path, std::string_view what, std::ios::openmode mode) {
    check_user_file(path, what);
    std::ifstream f(path, mode | std::ios::in);
    if (!f) fail("{}: cannot open: {}", named(path, what), std::strerror(errno));
    return f;
}

}  // namespace nitro
