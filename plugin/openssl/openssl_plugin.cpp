// libddprun_openssl.so: what ddprun does with OpenSSL (see openssl_plugin.hpp).
#include "ddprun/store/openssl_plugin.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <stdexcept>
#include <type_traits>

#include "etcd_tls.hpp"
#include "etcd_transport.hpp"

namespace ddprun {
namespace {

class Plugin final : public OpenSslPlugin {
  public:
    std::string hmac_sha256(std::string_view key, std::string_view data) const override {
        unsigned char mac[EVP_MAX_MD_SIZE];
        unsigned int length = 0;
        // HMAC() (not the deprecated HMAC_CTX) is OpenSSL 3's one-shot HMAC.
        if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
                 reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac,
                 &length) == nullptr)
            throw std::runtime_error("OpenSSL HMAC-SHA256 failed");
        return {reinterpret_cast<const char*>(mac), length};
    }

    std::optional<std::string> check_tls_files(const EtcdTls& tls) const override {
        return tls_files_problem(tls);
    }

    std::unique_ptr<EtcdTransport> etcd_transport(const EtcdOptions& options) const override {
        return make_beast_transport(options);
    }
};

}  // namespace
}  // namespace ddprun

extern "C" __attribute__((visibility("default"))) const ddprun::OpenSslPlugin*
ddprun_openssl_plugin_v1() {
    static_assert(std::is_same_v<decltype(&ddprun_openssl_plugin_v1), ddprun::OpenSslPluginEntry>);
    static const ddprun::Plugin plugin;
    return &plugin;
}
