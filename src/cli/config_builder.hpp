// ConfigBuilder: how cli.cpp and cli_supervision.cpp fill a LaunchConfig from
// the settings gathered from the command line, the job file and the environment.
#pragma once

#include <map>
#include <optional>
#include <string_view>

#include "cli_parse.hpp"
#include "cli_values.hpp"
#include "ddprun/config/config.hpp"

namespace ddprun::cli {

// Each option's setting, by canonical name: the command line's, else the job
// file's, else DDPRUN_<NAME>'s, else PET_<NAME>'s.
using Settings = std::map<std::string_view, Setting>;

// Fills a LaunchConfig field by field; the first bad value wins and the rest
// are skipped, so the user sees one line.
class ConfigBuilder {
  public:
    explicit ConfigBuilder(const Settings& settings) : m_settings(settings) {}

    const Setting* find(std::string_view name) const {
        auto it = m_settings.find(name);
        return it == m_settings.end() ? nullptr : &it->second;
    }

    template <typename T, typename Parse>
    void set(std::string_view name, T& field, Parse parse) {
        const Setting* setting = find(name);
        if (m_error || setting == nullptr) return;
        auto value = parse(*setting);
        if (value)
            field = std::move(*value);
        else
            m_error = std::move(value.error());
    }

    void fail(Error error) {
        if (!m_error) m_error = std::move(error);
    }
    const std::optional<Error>& error() const { return m_error; }

  private:
    const Settings& m_settings;
    std::optional<Error> m_error;
};

// --hang-timeout, --hang-timeout-first, --straggler-fraction, --straggler-window,
// --max-no-progress-restarts, --progress-file,
// --health-check, --health-check-timeout, --collapse-lines, --collapse-window
// (cli_supervision.cpp).
void resolve_supervision(ConfigBuilder& b, LaunchConfig& config);

// --report-lines, every value of it (cli_supervision.cpp).
void resolve_report_lines(const std::vector<std::string>& given, ConfigBuilder& b,
                          LaunchConfig& config);

// --hosts / --hostfile and their companions into config.fan_out (cli_fan_out.cpp).
void resolve_fan_out(const std::vector<Given>& parsed, const Settings& settings, ConfigBuilder& b,
                     LaunchConfig& config);

// torchrun 2.x's options that name what ddprun does its own way, mapped onto it:
// --log-line-prefix-template (onto --log-prefix), --duplicate-stdout-filters,
// --duplicate-stderr-filters, --event-log-handler (onto --event-log), --logs-specs
// (cli_torchrun.cpp). After --log-prefix and --event-log are set.
void resolve_torchrun_options(ConfigBuilder& b, LaunchConfig& config);

// --print-completion SHELL's script, or a usage error naming the shell.
std::expected<std::string, Error> completion_script(const std::string& shell);

}  // namespace ddprun::cli
