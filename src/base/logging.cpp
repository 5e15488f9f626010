// spdlog set up for ddprun's own one-line messages (see logging.hpp).
#include "ddprun/base/logging.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <memory>

namespace ddprun {
namespace {

// "%*" in the pattern: a word for the levels a user must notice, nothing for info.
class LevelWord : public spdlog::custom_flag_formatter {
  public:
    void format(const spdlog::details::log_msg& msg, const std::tm&,
                spdlog::memory_buf_t& dest) override {
        std::string_view word;
        switch (msg.level) {
            case spdlog::level::warn:
                word = "warning: ";
                break;
            case spdlog::level::err:
            case spdlog::level::critical:
                word = "error: ";
                break;
            case spdlog::level::debug:
            case spdlog::level::trace:
                word = "debug: ";
                break;
            default:
                break;
        }
        dest.append(word.data(), word.data() + word.size());
    }
    std::unique_ptr<custom_flag_formatter> clone() const override {
        return std::make_unique<LevelWord>();
    }
};

}  // namespace

void setup_logging(int verbosity) {
    auto logger = std::make_shared<spdlog::logger>(
        "ddprun", std::make_shared<spdlog::sinks::stderr_sink_st>());
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<LevelWord>('*').set_pattern("ddprun: %*%v");
    logger->set_formatter(std::move(formatter));
    spdlog::level::level_enum level = spdlog::level::info;
    if (verbosity < 0) level = spdlog::level::err;
    if (verbosity == 1) level = spdlog::level::debug;
    if (verbosity >= 2) level = spdlog::level::trace;
    logger->set_level(level);
    logger->flush_on(spdlog::level::trace);
    spdlog::set_default_logger(std::move(logger));
}

}  // namespace ddprun
