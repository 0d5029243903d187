// The cheap check `nitro serve` makes before it opens the model: can it bind --host:--port? A
// 60 GB model must not load for minutes and then find the port taken.
#pragma once

#include <string>

namespace nitro::server {

/// Binds host:port the way the HTTP server will (each address getaddrinfo gives, SO_REUSEADDR,
/// no SO_REUSEPORT) and holds the socket, unlistened, until release() or destruction, so the
/// port stays ours while the model loads. Port 0 (any free port) binds nothing. Throws
/// nitro::Error naming host, port and the system's reason when no address can be bound.
class PortReservation {
public:
    PortReservation(const std::string& host, int port);
    ~PortReservation();
    PortReservation(const PortReservation&) = delete;
    PortReservation& operator=(const PortReservation&) = delete;
    /// Closes the socket (call right before the server binds the port itself).
    void release();

private:
    int fd_ = -1;
};

}  // namespace nitro::server
