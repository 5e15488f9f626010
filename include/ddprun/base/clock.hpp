// The two clocks ddprun reads, in milliseconds: wall time for what travels
// between nodes (when a worker failed, comparable across hosts), steady time
// for what one process measures (how long since a heartbeat).
#pragma once

#include <chrono>
#include <cstdint>

namespace ddprun {

inline std::int64_t wall_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

inline std::int64_t steady_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

}  // namespace ddprun
