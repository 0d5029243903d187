#include "server/port_check.h"

#include "core/error.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace nitro::server {

PortReservation::PortReservation(const std::string& host, int port) {
    if (port == 0) return;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* list = nullptr;
    const std::string service = std::to_string(port);
    if (const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list); rc != 0)
        fail("--host '{}': {}", host, gai_strerror(rc));
    int err = 0;
    for (const addrinfo* a = list; a && fd_ < 0; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        const int yes = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
        if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0) {
            fd_ = fd;
        } else {
            err = errno;
            ::close(fd);
        }
    }
    freeaddrinfo(list);
    if (fd_ < 0)
        fail("cannot bind {}:{}: {}{}", host, port, std::strerror(err),
             err == EADDRINUSE ? " (another server holds it: stop it, or choose another --port; --port 0 takes any free one)"
                               : "");
}

PortReservation::~PortReservation() { release(); }

void PortReservation::release() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
}

}  // namespace nitro::server
