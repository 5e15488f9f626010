// A real etcd for the tests (Debian's etcd-server): each member runs from a
// temporary data dir on free client and peer ports of 127.0.0.1, started by
// the test and stopped by pid (SIGTERM, then SIGKILL), never by name. A
// cluster of several members is the failover tests' three-member etcd.
// Where etcd is not installed, ready() is false and error() says why, so the
// test can skip with that message.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace ddprun {

class EtcdCluster {
  public:
    // Starts `members` etcd processes forming one cluster and waits (bounded)
    // until the cluster answers.
    explicit EtcdCluster(int members = 1);
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
    // Stops every member.
    void stop();

  private:
    struct Member {
        pid_t pid = -1;
        int client_port = 0;
        int peer_port = 0;
        std::string name;
    };
    std::string m_dir;
    std::vector<Member> m_members;
    std::string m_error;
};

}  // namespace ddprun
