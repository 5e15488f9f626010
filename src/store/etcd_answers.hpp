// What an etcd member's error answers mean, each in one line that says what
// to do. Internal to the etcd client (etcd_client.cpp, etcd_auth.cpp).
//
// Why this file exists: etcd says why it refused in its own words
// ("etcdserver: user name is empty"); turning those into a line that names
// the --rdzv_conf key to fix is a concern of its own, and grows with each
// refusal seen in the field.
#pragma once

#include <string>
#include <string_view>

namespace ddprun {

bool contains(const std::string& text, std::string_view part);

// What a member that answered an HTTP error, or not JSON, said: one line.
// `user`: the etcd user of --rdzv_conf user ("" without one).
std::string refusal(const std::string& endpoint, unsigned status, const std::string& body,
                    const std::string& user = {});

// True when etcd refused the token sent (or its absence): forgotten after
// --auth-token-ttl unused, a restarted member, authentication turned on since.
bool token_refused(unsigned status, const std::string& said);

}  // namespace ddprun
