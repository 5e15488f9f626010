// Where a multi-node job's workers find their store at MASTER_ADDR:MASTER_PORT.
//
// torchrun 2.x (c10d and static rendezvous) shares the agents' store: node 0's agent
// hosts a TCPStore there and sets TORCHELASTIC_USE_AGENT_STORE=True, so that
// init_process_group connects every rank as a client and no rank hosts one;
// TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 turns that off. ddprun does the same on its
// store backends with a store of its own per round (the workers' keys never meet the
// agents'), except where torch's own client of it could not start: torch 2.4 and later
// make it with c10d's defaults, which ask for libuv, and a torch without libuv
// (Debian's 2.x) then fails every init_process_group, USE_LIBUV=0 or not
// (rendezvous.py's agent branch drops use_libuv). There rank 0 keeps hosting, as
// before, unless the variable asks for sharing outright. etcd jobs never share: their
// agents have no TCPStore. A single node shares only when the variable asks: its agent
// loads no libtorch otherwise (DESIGN.md). docs/environment.md has the table.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "ddprun/base/environment.hpp"

namespace ddprun {

inline constexpr std::string_view k_share_store_variable = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE";

struct WorkerStoreChoice {
    bool agent_hosts = false;  // node 0's agent hosts the workers' store
    // Why the agent does not share where torchrun would, for the log; empty otherwise.
    std::string why_not;
};

// Where the agents meet: nowhere (one node), in a TCPStore (c10d, static), in etcd.
enum class AgentsMeet { OneNode, TcpStore, Etcd };

// TORCH_DISABLE_SHARE_RDZV_TCP_STORE: "1" keeps rank 0's store, any other value shares
// (torchrun's test: != "1"); unset or empty, a TcpStore job shares where
// `defaults_start()` (the plugin's libtorch starts a TCPStore made with its defaults)
// says torch's clients can, and one node does not.
WorkerStoreChoice choose_worker_store(AgentsMeet meet, const Environment& env,
                                      const std::function<bool()>& defaults_start);

}  // namespace ddprun
