// What the agents' side (elastic.cpp) and the leader's thread
// (elastic_leader.cpp) share: where an answer is written, and how waits are cut.
#pragma once

#include <chrono>
#include <string>

#include <fmt/format.h>

#include "ddprun/elastic/elastic.hpp"
#include "ddprun/store/store.hpp"

namespace ddprun::elastic_shared {

// Waits are cut in slices this long, so that a cancelled join or a closing
// leader returns promptly; events themselves wake the waits at once.
inline constexpr std::chrono::milliseconds k_slice{500};

inline std::string answer_key(const std::string& run_id, int agent, int number) {
    return JobKeys(run_id).elastic(fmt::format("answer/{}/{}", agent, number));
}

}  // namespace ddprun::elastic_shared
