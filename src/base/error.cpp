// What an escaped exception means (see error.hpp).
#include "ddprun/base/error.hpp"

#include <cerrno>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

namespace ddprun {

Error uncaught_error(std::exception_ptr error) {
    try {
        if (error) std::rethrow_exception(error);
    } catch (const std::system_error& e) {
        const int code = e.code().value();
        if (e.code().category() == std::system_category() &&
            (code == ECONNRESET || code == ECONNABORTED || code == EPIPE || code == ENOTCONN ||
             code == ECONNREFUSED))
            return rendezvous_error(fmt::format(
                "lost the rendezvous store: {} (the store's host is gone: was node 0's ddprun "
                "killed?)",
                e.what()));
        return {fmt::format("internal error: {}", e.what()), exit_code::kInternal};
    } catch (const std::exception& e) {
        return {fmt::format("internal error: {}", e.what()), exit_code::kInternal};
    } catch (...) {
    }
    return {"internal error: an unknown exception escaped", exit_code::kInternal};
}

}  // namespace ddprun
