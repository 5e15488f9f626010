#include "ddprun/rendezvous/job_keys.hpp"

#include <fmt/format.h>

namespace ddprun {

std::string JobKeys::run_id_key() {
    return fmt::format("{}run_id", k_root);
}

std::string JobKeys::run_prefix(std::string_view root) const {
    return fmt::format("{}{}/", root, m_run_id);
}

std::string JobKeys::lease(std::string_view root) const {
    return run_prefix(root) + "lease";
}

std::string JobKeys::in_round(int round, std::string_view name) {
    return fmt::format("r{}/{}", round, name);
}

std::string JobKeys::in_elastic(std::string_view name) {
    return fmt::format("e/{}", name);
}

std::string JobKeys::round(int round, std::string_view name) const {
    return run_prefix() + in_round(round, name);
}

std::string JobKeys::elastic(std::string_view name) const {
    return run_prefix() + in_elastic(name);
}

std::string JobKeys::status(int node_rank) const {
    return run_prefix() + fmt::format("status/{}", node_rank);
}

std::string JobKeys::out() const {
    return run_prefix() + "out";
}

}  // namespace ddprun
