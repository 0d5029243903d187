// SHA-256 (FIPS 180-4) through OpenSSL's libcrypto (EVP): the digest Hugging Face and `sha256sum`
// show for a file, so a benchmark record names the exact model file a user can check.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace nitro {

/// Lower-case hex SHA-256 of n bytes at p. Throws nitro::Error if libcrypto fails.
std::string sha256_hex(const void* p, size_t n);

/// SHA-256 of a stream fed in pieces (a download checked against the digest Hugging Face lists).
class Sha256 {
public:
    Sha256();
    ~Sha256();
    Sha256(Sha256&&) noexcept;
    Sha256& operator=(Sha256&&) noexcept;
    /// Adds n more bytes. Throws nitro::Error if libcrypto fails.
    void update(const void* p, size_t n);
    /// Lower-case hex digest of everything added; the object starts over afterwards.
    std::string hex_digest();

private:
    struct Ctx;
    std::unique_ptr<Ctx> ctx_;
};

}  // namespace nitro
