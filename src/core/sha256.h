// SHA-256 (FIPS 180-4) through OpenSSL's libcrypto (EVP): the digest Hugging Face and `sha256sum`
// show for a file, so a benchmark record names the exact model file a user can check.
#pragma once

#include <cstddef>
#include <string>

namespace nitro {

/// Lower-case hex SHA-256 of n bytes at p. Throws nitro::Error if libcrypto fails.
std::string sha256_hex(const void* p, size_t n);

}  // namespace nitro
