#include "core/sha256.h"

#include "core/error.h"

#include <openssl/evp.h>

#include <memory>

namespace nitro {

namespace {

using EvpCtx = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

EvpCtx start() {
    EvpCtx c(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
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

struct Sha256::Ctx {
    EvpCtx c = start();
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(const void* p, size_t n) {
    if (EVP_DigestUpdate(ctx_->c.get(), p, n) != 1) fail("sha256: libcrypto failed on {} bytes", n);
}

std::string Sha256::hex_digest() {
    std::string s = finish(ctx_->c.get());
    ctx_->c = start();
    return s;
}

std::string sha256_hex(const void* p, size_t n) {
    EvpCtx c = start();
    if (EVP_DigestUpdate(c.get(), p, n) != 1) fail("sha256: libcrypto failed on {} bytes", n);
    return finish(c.get());
}

}  // namespace nitro
