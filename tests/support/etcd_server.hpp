// A real etcd for the tests (Debian's etcd-server): each member runs from a
// temporary data dir on free client and peer ports of 127.0.0.1, started by
// the test and stopped by pid (SIGTERM, then SIGKILL), never by name. A
// cluster of several members is the failover tests' three-member etcd.
// Where etcd is not installed, ready() is false and error() says why, so the
// test can skip with that message.
//
// A secured cluster (EtcdSecurity) serves its clients over TLS with a
// certificate of a throwaway CA that the harness makes with the `openssl`
// command in the temp dir, may require client certificates, and may have
// authentication on, with a user for the tests.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "ddprun/store/etcd_client.hpp"

namespace ddprun {

struct EtcdSecurity {
    bool tls = false;               // https client URLs (peers stay http)
    bool client_cert_auth = false;  // --client-cert-auth: clients need a certificate of the CA
    bool auth = false;              // users root and k_user (readwrite on /ddprun/), auth on
    int auth_token_ttl = 0;         // --auth-token-ttl in seconds; 0: etcd's default (300)
};

class EtcdCluster {
  public:
    // The user of a cluster with authentication on, and its password (also in
    // password_file()).
    static constexpr const char* k_user = "trainer";
    static constexpr const char* k_password = "correct horse";

    // Starts `members` etcd processes forming one cluster and waits (bounded)
    // until the cluster answers. `flags`: more of etcd's flags for every member
    // (e.g. auto-compaction, as a site runs it).
    explicit EtcdCluster(int members = 1, EtcdSecurity security = {},
                         std::vector<std::string> flags = {});
    ~EtcdCluster();
    EtcdCluster(const EtcdCluster&) = delete;
    EtcdCluster& operator=(const EtcdCluster&) = delete;

    bool ready() const { return m_error.empty(); }
    const std::string& error() const { return m_error; }

    // "127.0.0.1:P1,127.0.0.1:P2,..." for --rdzv_endpoint.
    std::string endpoints() const;
    // The same, member `first` first (the one a client talks to).
    std::string endpoints_from(int first) const;
    int size() const { return static_cast<int>(m_members.size()); }
    std::vector<int> client_ports() const;
    // Member `index`'s etcd process (-1 once stopped).
    pid_t pid(int index) const { return m_members.at(static_cast<std::size_t>(index)).pid; }
    // The index of the member that is the raft leader now (-1 if none answers).
    int leader() const;
    // SIGKILLs member `index` (a failover test).
    void kill(int index);
    // Starts member `index` again after kill(), on its ports and data: true once it
    // answers (bounded: 30 s).
    bool restart(int index);
    // Stops every member.
    void stop();

    // With TLS, files in the harness's temp dir: the CA that signed etcd's
    // certificate (for 127.0.0.1 only), a client certificate of that CA and
    // its key, another CA that etcd knows nothing of (a wrong ca_cert), and a
    // certificate of that CA for the same client key (one etcd does not trust).
    std::string ca_cert() const { return m_dir + "/ca.pem"; }
    std::string client_cert() const { return m_dir + "/client.pem"; }
    std::string client_key() const { return m_dir + "/client.key"; }
    std::string other_ca() const { return m_dir + "/other-ca.pem"; }
    std::string other_client_cert() const { return m_dir + "/other-client.pem"; }
    // A certificate of the CA for the same key, with a Common Name (CN=trainer).
    std::string named_client_cert() const { return m_dir + "/named-client.pem"; }
    // With authentication: a file that holds k_user's password.
    std::string password_file() const { return m_dir + "/password"; }
    // What a client needs to reach member `index` (as root, with authentication on).
    EtcdOptions client_options(int index, std::chrono::milliseconds timeout) const;

  private:
    bool make_certificates();
    bool enable_authentication();

    struct Member {
        pid_t pid = -1;
        int client_port = 0;
        int peer_port = 0;
        std::string name;
        std::vector<std::string> args;  // etcd's command line
    };
    void launch(Member& member);
    std::string m_dir;
    EtcdSecurity m_security;
    bool m_auth_enabled = false;
    std::vector<Member> m_members;
    std::string m_error;
};

}  // namespace ddprun
