#include "core/sha256.h"

#include "core/error.h"

#include <openssl/evp.h>

#include <memory>

namespace nitro {

namespace {

using Ctx = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

Ctx start() {
    Ctx c(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
    if (!c || EVP_DigestInit_ex(c.get(), EVP_sha256(), nullptr) != 1) fail("sha256: libcrypto could not start a digest");
    return c;
}

std::string finish(EVP_MD_CTX* c) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(c, md, &len) != 1 || len != 32) fail("sha256: libcrypto could not finish the digest");
    static const char* hex = "0123456789abcdef";
    std::string s(64, '0');
    for (unsigned i = 0; i < 32; ++i) {
        s[2 * i] = hex[md[i] >> 4];
        s[2 * i + 1] = hex[md[i] & 15];
    }
    return s;
}

}  // namespace

std::string sha256_hex(const void* p, size_t n) {
    Ctx c = start();
    if (EVP_DigestUpdate(c.get(), p, n) != 1) fail("sha256: libcrypto failed on {} bytes", n);
    return finish(c.get());
}

}  // namespace nitro
