// TLS to etcd: context, per-connection checks, messages (see etcd_tls.hpp).
#include "etcd_tls.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509err.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/error.hpp>

#include <fmt/format.h>

namespace ddprun {

namespace ssl = boost::asio::ssl;

namespace {

// "" if `path` can be opened for reading, else why not (strerror).
std::string unreadable(const std::string& path) {
    std::FILE* file = std::fopen(path.c_str(), "r");
    if (file == nullptr) return std::strerror(errno);
    std::fclose(file);
    return {};
}

[[noreturn]] void refuse(const char* key, const std::string& path, const std::string& problem) {
    throw std::runtime_error(fmt::format("--rdzv_conf {}={}: {}", key, path, problem));
}

// Loads one file into the context, or throws naming it.
template <class Load>
void load(const char* key, const std::string& path, const char* what, Load load_file) {
    if (auto why = unreadable(path); !why.empty())
        refuse(key, path, fmt::format("cannot read it ({})", why));
    boost::system::error_code ec;
    load_file(ec);
    if (ec) refuse(key, path, fmt::format("not {} in PEM form ({})", what, ec.message()));
}

int reason_of(const boost::beast::error_code& ec) {
    return ERR_GET_REASON(static_cast<unsigned long>(ec.value()));
}

}  // namespace

std::unique_ptr<ssl::context> make_tls_context(const EtcdTls& tls) {
    auto context = std::make_unique<ssl::context>(ssl::context::tls_client);
    SSL_CTX_set_min_proto_version(context->native_handle(), TLS1_2_VERSION);
    context->set_verify_mode(ssl::verify_peer);
    if (tls.ca_cert.empty()) {
        boost::system::error_code ec;
        context->set_default_verify_paths(ec);
        if (ec)
            throw std::runtime_error(fmt::format(
                "cannot load this system's CA certificates ({}); pass --rdzv_conf ca_cert=PATH",
                ec.message()));
    } else {
        load("ca_cert", tls.ca_cert, "a CA certificate",
             [&](auto& ec) { context->load_verify_file(tls.ca_cert, ec); });
    }
    if (!tls.cert.empty()) {
        load("ssl_cert", tls.cert, "a certificate",
             [&](auto& ec) { context->use_certificate_chain_file(tls.cert, ec); });
        bool mismatch = false;
        load("ssl_cert_key", tls.key, "a private key", [&](auto& ec) {
            context->use_private_key_file(tls.key, ssl::context::pem, ec);
            // OpenSSL compares the key with the certificate as it loads it.
            mismatch = ec && ERR_GET_REASON(static_cast<unsigned long>(ec.value())) ==
                                 X509_R_KEY_VALUES_MISMATCH;
            if (mismatch) ec.clear();
        });
        if (mismatch || SSL_CTX_check_private_key(context->native_handle()) != 1) {
            ERR_clear_error();
            refuse("ssl_cert_key", tls.key,
                   fmt::format("is not the private key of ssl_cert={}", tls.cert));
        }
    }
    return context;
}

std::optional<std::string> tls_files_problem(const EtcdTls& tls) {
    try {
        make_tls_context(tls);
    } catch (const std::runtime_error& error) {
        return error.what();
    }
    return std::nullopt;
}

bool expect_host(SSL* ssl, const std::string& host, std::string& error) {
    boost::system::error_code not_address;
    boost::asio::ip::make_address(host, not_address);
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    bool set = false;
    if (not_address) {
        // SNI only for a name: RFC 6066 does not allow an address there.
        set = SSL_set_tlsext_host_name(ssl, host.c_str()) == 1 &&
              X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size()) == 1;
    } else {
        set = X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) == 1;
    }
    if (!set) {
        error = fmt::format("OpenSSL refused '{}' as the host to verify ({})", host,
                            ERR_reason_error_string(ERR_get_error()));
        ERR_clear_error();
    }
    return set;
}

bool is_tls_refusal(const boost::beast::error_code& ec) {
    // stream_truncated (no close_notify) is a connection that dropped, not a refusal.
    return ec.category() == boost::asio::error::get_ssl_category();
}

bool is_hang_up(const boost::beast::error_code& ec) {
    return ec == ssl::error::stream_truncated || ec == boost::asio::error::eof ||
           ec == boost::asio::error::connection_reset;
}

std::string tls_failure(const std::string& endpoint, const boost::beast::error_code& ec, SSL* ssl,
                        const EtcdTls& tls, bool during_handshake) {
    const std::string what =
        fmt::format("etcd at {}: {}", endpoint,
                    during_handshake ? "TLS handshake failed" : "refused the TLS connection");
    const int reason = reason_of(ec);
    if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED) {
        const long result = ssl != nullptr ? SSL_get_verify_result(ssl) : X509_V_OK;
        const std::string detail =
            result == X509_V_OK ? "" : std::string(": ") + X509_verify_cert_error_string(result);
        std::string hint =
            tls.ca_cert.empty()
                ? "etcd's certificate is not signed by a CA this system trusts: pass "
                  "--rdzv_conf ca_cert=PATH"
                : "is --rdzv_conf ca_cert the CA that signed etcd's certificate?";
        if (result == X509_V_ERR_HOSTNAME_MISMATCH || result == X509_V_ERR_IP_ADDRESS_MISMATCH)
            hint =
                "etcd's certificate does not name this host: give --rdzv_endpoint the name or "
                "address its subjectAltName lists";
        if (result == X509_V_ERR_CERT_HAS_EXPIRED || result == X509_V_ERR_CERT_NOT_YET_VALID)
            hint = "renew etcd's certificate, or check this machine's clock";
        return fmt::format("{}: {}{} ({})", what, ec.message(), detail, hint);
    }
    std::string hint = "check --rdzv_conf protocol, ca_cert, ssl_cert and ssl_cert_key";
    if (during_handshake && is_hang_up(ec))
        // etcd closes a connection that greets its plain http port with TLS.
        return fmt::format(
            "{}: {} (etcd hung up: if it serves plain http, drop --rdzv_conf protocol=https)", what,
            ec.message());
    if (reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED ||
        (tls.cert.empty() && (reason == SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE ||
                              reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE)))
        hint =
            "etcd requires a client certificate: add --rdzv_conf "
            "ssl_cert=PATH,ssl_cert_key=PATH";
    else if (reason == SSL_R_TLSV1_ALERT_UNKNOWN_CA ||
             reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE ||
             reason == SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN)
        hint =
            "etcd does not accept --rdzv_conf ssl_cert: it must be signed by the CA of "
            "etcd's --trusted-ca-file";
    else if (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_PACKET_LENGTH_TOO_LONG)
        hint = "it does not speak TLS: if it serves plain http, drop --rdzv_conf protocol=https";
    return fmt::format("{}: {} ({})", what, ec.message(), hint);
}

}  // namespace ddprun
