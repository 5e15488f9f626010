// EtcdTransport (openssl_plugin.hpp) over Boost.Beast: internal to the OpenSSL plugin.
#pragma once

#include <memory>

#include "ddprun/store/openssl_plugin.hpp"

namespace ddprun {

// Throws StoreError Other when the TLS files of `options.tls` cannot be used.
std::unique_ptr<EtcdTransport> make_beast_transport(const EtcdOptions& options);

}  // namespace ddprun
