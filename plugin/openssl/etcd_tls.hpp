// TLS to etcd (--rdzv_conf protocol=https): the OpenSSL context made from
// --rdzv_conf ca_cert, ssl_cert and ssl_cert_key, the checks set on each
// connection, and what a failed handshake or a refused connection means in
// one line. Internal to the OpenSSL plugin (etcd_transport.cpp, and the
// start-up check of the files).
//
// Why this file exists: the certificate handling and its messages are a
// concern of their own; the client only calls these around its handshake.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/error.hpp>

#include "ddprun/store/etcd_client.hpp"

namespace ddprun {

// A client context that verifies the peer against `tls.ca_cert` (the
// system's CAs when empty) and presents `tls.cert`/`tls.key` when given.
// Throws std::runtime_error, one line naming the --rdzv_conf key and path.
std::unique_ptr<boost::asio::ssl::context> make_tls_context(const EtcdTls& tls);

// What is wrong with the files, in make_tls_context's words; nullopt if nothing.
std::optional<std::string> tls_files_problem(const EtcdTls& tls);

// Sets what a connection to `host` checks beyond the chain: SNI (for a name,
// not an address) and that etcd's certificate names `host` (its DNS name or
// IP address, OpenSSL's X509_VERIFY_PARAM, so a mismatch is reported as one).
// False (and `error` set) if OpenSSL refused the settings.
bool expect_host(SSL* ssl, const std::string& host, std::string& error);

// True when `ec` is a refusal at the TLS level (a handshake failure, an alert
// from etcd), as opposed to a connection that dropped: then no other try
// will do better, and tls_failure() explains it.
bool is_tls_refusal(const boost::beast::error_code& ec);

// True when `ec` says the other side closed the connection (with or without
// TLS's close_notify): during a handshake, a sign that it does not speak TLS.
bool is_hang_up(const boost::beast::error_code& ec);

// One line for a refusal: "etcd at 127.0.0.1:2379: TLS handshake failed:
// certificate verify failed: ... (is --rdzv_conf ca_cert the CA that signed
// etcd's certificate?)". `during_handshake`: false for an alert that arrived
// with the first answer (TLS 1.3 sends the server's verdict on the client
// certificate then).
std::string tls_failure(const std::string& endpoint, const boost::beast::error_code& ec, SSL* ssl,
                        const EtcdTls& tls, bool during_handshake);

}  // namespace ddprun
