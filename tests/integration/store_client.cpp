// store_client: a stray client of a running job's rendezvous store, for the
// reliability tests. It writes whatever it is told under whatever key it is
// told (garbage under the job's own keys, typically), the way a buggy script
// or a second job with the same --rdzv_id could, so the tests can check that
// the agents answer with a clear error instead of a crash or a hang.
//
//   store_client HOST PORT set KEY VALUE [set KEY VALUE ...]
//   store_client HOST PORT wait KEY [set KEY VALUE ...]   wait (10 s at most) until KEY exists
//   store_client HOST PORT add KEY N ...                  add N to the counter KEY, print it
//
// It reaches the store through ddprun's own Store API and plugin (the c10d
// TCPStore client), so it speaks the same protocol as the agents.
// Exit codes: 0 done, 1 a store operation failed (message on stderr), 64 usage.

#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "ddprun/store/store.hpp"

namespace {

constexpr int k_usage_exit = 64;

int usage() {
    std::cerr << "usage: store_client HOST PORT {set KEY VALUE | add KEY N | wait KEY}...\n";
    return k_usage_exit;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.size() < 2) return usage();
    // The plugin is not beside this binary (it sits beside ddprun).
    ::setenv("DDPRUN_STORE_PLUGIN", STORE_PLUGIN, 0);
    try {
        ddprun::StoreOptions options;
        options.host = args[0];
        options.port = std::stoi(args[1]);
        options.timeout = std::chrono::seconds(10);
        auto store = ddprun::open_tcp_store(options);
        for (std::size_t at = 2; at < args.size();) {
            if (args[at] == "set" && at + 2 < args.size()) {
                store->set(args[at + 1], args[at + 2]);
                at += 3;
            } else if (args[at] == "add" && at + 2 < args.size()) {
                std::cout << store->add(args[at + 1], std::stoll(args[at + 2])) << "\n";
                at += 3;
            } else if (args[at] == "wait" && at + 1 < args.size()) {
                store->wait({args[at + 1]}, std::chrono::seconds(10));
                at += 2;
            } else {
                return usage();
            }
        }
    } catch (const std::exception& error) {
        std::cerr << "store_client: " << error.what() << "\n";
        return 1;
    }
    return 0;
}
