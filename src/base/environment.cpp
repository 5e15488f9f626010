// The process environment as a map (see environment.hpp), and the one-line
// error of a failed syscall (error.hpp).
#include "ddprun/base/environment.hpp"

#include <cerrno>
#include <cstring>
#include <string_view>

#include "ddprun/base/error.hpp"

namespace ddprun {

Environment environment_from(char** envp) {
    Environment env;
    for (char** entry = envp; entry != nullptr && *entry != nullptr; ++entry) {
        std::string_view text = *entry;
        auto equals = text.find('=');
        if (equals == std::string_view::npos) continue;
        env.emplace(std::string(text.substr(0, equals)), std::string(text.substr(equals + 1)));
    }
    return env;
}

Error system_error(const std::string& call) {
    return {call + ": " + std::strerror(errno), exit_code::kInternal};
}

}  // namespace ddprun
