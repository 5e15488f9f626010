// How every message of ddprun tells a user a duration: "850 ms", "1.5 s",
// "15 s", "2 min 30 s", "1 h 5 min", the units the README and docs write. (A
// message that repeats an option's value writes it as the option takes it,
// "--hang-timeout=30": that is a value to type, not a duration to read.)
// Header-only: the store plugin (plugin/), which must not link libddprun,
// writes its messages with it too.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ddprun {

// Under a second in milliseconds; under a minute in seconds to the tenth, with
// no ".0"; from a minute on in whole seconds, as hours, minutes and seconds
// without the units that are zero. Zero is "0 s".
inline std::string duration_text(std::chrono::milliseconds duration) {
    const std::int64_t ms = duration.count();
    if (ms < 0) return "-" + duration_text(std::chrono::milliseconds(-ms));
    if (ms == 0) return "0 s";
    if (ms < 1000) return std::to_string(ms) + " ms";
    const std::int64_t tenths = (ms + 50) / 100;
    if (tenths < 600) {
        std::string text = std::to_string(tenths / 10);
        if (tenths % 10 != 0) text += "." + std::to_string(tenths % 10);
        return text + " s";
    }
    const std::int64_t seconds = (ms + 500) / 1000;
    std::string text;
    auto add = [&text](std::int64_t count, const char* unit) {
        if (count == 0) return;
        if (!text.empty()) text += ' ';
        text += std::to_string(count) + ' ' + unit;
    };
    add(seconds / 3600, "h");
    add(seconds / 60 % 60, "min");
    add(seconds % 60, "s");
    return text;
}

// Any other duration (whole seconds, a double's seconds, a clock's
// nanoseconds), to the nearest millisecond.
template <class Rep, class Period>
std::string duration_text(std::chrono::duration<Rep, Period> duration) {
    return duration_text(std::chrono::round<std::chrono::milliseconds>(duration));
}

}  // namespace ddprun
