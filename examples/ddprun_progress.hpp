// Progress beats for ddprun's hang detection (--hang-timeout), in one call:
//
//     #include "ddprun_progress.hpp"
//     for (int step = 0; step < steps; ++step) {
//         ddprun::beat("step " + std::to_string(step));  // no-op outside ddprun --hang-timeout
//         train_one_step();
//     }
//
// ddprun gives each worker a file descriptor named in DDPRUN_PROGRESS_FD; every
// write to it is a beat, and the last line written is the rank's label in
// ddprun's reports. The write never blocks, even while ddprun is stopped. This
// header only saves the lookup: write(fd, "step 3\n", 7) is enough.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <string_view>

namespace ddprun {

inline void beat(std::string_view label = {}) {
    static const int fd = [] {
        const char* name = std::getenv("DDPRUN_PROGRESS_FD");
        return name != nullptr ? std::atoi(name) : -1;
    }();
    if (fd < 0) return;
    std::string line(label);
    for (char& c : line)
        if (c == '\n') c = ' ';
    line += '\n';
    (void)!::write(fd, line.data(), line.size());  // one write: one beat
}

}  // namespace ddprun
