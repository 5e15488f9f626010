// Finds the devices workers are given (see devices.hpp). Reads only the
// inherited CUDA_VISIBLE_DEVICES and the driver's /proc tree: no CUDA, no NVML
// link, so ddprun starts in milliseconds on any machine.
#include "ddprun/devices.hpp"

#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <thread>

namespace ddprun {

std::vector<std::string> split_visible_devices(const std::string& value) {
    std::vector<std::string> devices;
    std::size_t start = 0;
    while (start <= value.size()) {
        std::size_t end = value.find(',', start);
        if (end == std::string::npos) end = value.size();
        std::string entry = value.substr(start, end - start);
        entry.erase(0, entry.find_first_not_of(" \t"));
        entry.erase(entry.find_last_not_of(" \t") + 1);
        // CUDA stops at the first invalid entry; "-1" is the common "no GPU" spelling.
        if (entry == "-1") break;
        if (!entry.empty()) devices.push_back(entry);
        start = end + 1;
    }
    return devices;
}

std::vector<std::string> discover_gpus(const std::string& proc_root) {
    std::error_code ec;
    std::filesystem::directory_iterator it(proc_root + "/driver/nvidia/gpus", ec);
    if (ec) return {};
    std::size_t count = 0;
    for (const auto& entry : it) {
        if (entry.is_directory(ec)) ++count;
    }
    std::vector<std::string> devices;
    for (std::size_t i = 0; i < count; ++i) devices.push_back(std::to_string(i));
    return devices;
}

NodeResources node_resources(const Environment& env, const std::string& proc_root) {
    NodeResources resources;
    if (auto it = env.find("CUDA_VISIBLE_DEVICES"); it != env.end()) {
        resources.devices = split_visible_devices(it->second);
        resources.devices_inherited = true;
    } else {
        resources.devices = discover_gpus(proc_root);
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
        resources.cpus = CPU_COUNT(&set);
    } else {
        resources.cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    }
    return resources;
}

}  // namespace ddprun
