#include "datasets/md5.h"

#include <openssl/evp.h>

#include "core/error.h"

namespace asgd::datasets {
namespace {

EVP_MD_CTX* Ctx(void* p) { return static_cast<EVP_MD_CTX*>(p); }

}  // namespace

Md5::Md5() {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (ctx == nullptr) throw IoError("libcrypto: cannot allocate an MD5 context");
  if (EVP_DigestInit_ex(ctx, EVP_md5(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx);
    throw IoError("libcrypto: MD5 is not available");
  }
  ctx_ = ctx;
}

Md5::~Md5() { EVP_MD_CTX_free(Ctx(ctx_)); }

void Md5::Update(std::span<const uint8_t> data) {
  if (data.empty()) return;
  EVP_DigestUpdate(Ctx(ctx_), data.data(), data.size());
}

void Md5::Update(std::string_view data) {
  Update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
}

std::string Md5::FinishHex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(Ctx(ctx_), digest, &len);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

std::string Md5Hex(std::string_view data) {
  Md5 md5;
  md5.Update(data);
  return md5.FinishHex();
}

}  // namespace asgd::datasets
