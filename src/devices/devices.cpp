// Finds the devices workers are given (see devices.hpp). NVML is dlopen'ed
// (never linked) and /proc is plain text, so ddprun starts on any machine and
// needs no CUDA at build time.
#include "ddprun/devices/devices.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string_view>
#include <system_error>
#include <thread>

#include "ddprun/base/text.hpp"
#include "ddprun/devices/topology.hpp"

namespace ddprun {
namespace {

// "Bus Location: \t 0000:3b:00.0" and "GPU UUID: \t GPU-..." lines of a
// driver `information` file.
void read_information(const std::filesystem::path& file, GpuInfo& gpu) {
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
        auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string_view key = trim(std::string_view(line).substr(0, colon));
        std::string_view value = trim(std::string_view(line).substr(colon + 1));
        if (key == "Bus Location" && !value.empty()) gpu.pci_bus_id = normalize_pci_bus_id(value);
        // The driver prints "??" for a GPU it has not initialized.
        if (key == "GPU UUID" && value.starts_with("GPU-")) gpu.uuid = value;
    }
}

// An entry that is an index: digits only ("+1" and "1x" are not), of any length.
std::optional<long long> device_index(const std::string& entry) {
    if (entry.empty() ||
        !std::all_of(entry.begin(), entry.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return std::nullopt;
    return to_integer(entry);
}

// The bus id of the one GPU whose UUID starts with `prefix`, "" if none or several.
std::string by_uuid(const std::string& prefix, const std::vector<GpuInfo>& gpus) {
    const GpuInfo* found = nullptr;
    for (const GpuInfo& gpu : gpus) {
        if (gpu.uuid.empty() || !gpu.uuid.starts_with(prefix)) continue;
        if (found != nullptr) return {};
        found = &gpu;
    }
    return found == nullptr ? std::string() : found->pci_bus_id;
}

}  // namespace

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

std::vector<GpuInfo> proc_gpus(const std::string& proc_root) {
    std::error_code ec;
    std::filesystem::directory_iterator it(proc_root + "/driver/nvidia/gpus", ec);
    if (ec) return {};
    std::vector<GpuInfo> gpus;
    for (const auto& entry : it) {
        if (!entry.is_directory(ec)) continue;
        GpuInfo gpu;
        // The directory is named after the bus id; `information` says it too.
        gpu.pci_bus_id = normalize_pci_bus_id(entry.path().filename().string());
        read_information(entry.path() / "information", gpu);
        gpus.push_back(std::move(gpu));
    }
    std::sort(gpus.begin(), gpus.end(),
              [](const GpuInfo& a, const GpuInfo& b) { return a.pci_bus_id < b.pci_bus_id; });
    for (std::size_t i = 0; i < gpus.size(); ++i) gpus[i].index = static_cast<int>(i);
    return gpus;
}

std::vector<std::string> discover_gpus(const std::string& proc_root) {
    std::vector<std::string> devices;
    for (const GpuInfo& gpu : proc_gpus(proc_root)) devices.push_back(std::to_string(gpu.index));
    return devices;
}

std::vector<std::string> locate_devices(const std::vector<std::string>& entries,
                                        const std::vector<GpuInfo>& gpus) {
    std::vector<std::string> bus_ids;
    for (const std::string& entry : entries) {
        std::string bus;
        if (auto index = device_index(entry)) {
            for (const GpuInfo& gpu : gpus)
                if (gpu.index == *index) bus = gpu.pci_bus_id;
        } else if (entry.starts_with("GPU-")) {
            bus = by_uuid(entry, gpus);
        } else if (entry.starts_with("MIG-GPU-")) {
            // Pre-R470 MIG names embed their GPU: MIG-GPU-<uuid>/<gi>/<ci>.
            std::string uuid = entry.substr(4, entry.find('/') - 4);
            bus = by_uuid(uuid, gpus);
        }
        bus_ids.push_back(bus);
    }
    return bus_ids;
}

NodeResources node_resources(const Environment& env, const DeviceSources& sources) {
    NodeResources resources;
    // NVML first: inside a container it lists only the GPUs this process can
    // open, while /proc lists every GPU of the host.
    auto machine_gpus = [&sources]() {
        if (!sources.nvml_library.empty())
            if (auto gpus = query_nvml(sources.nvml_library)) return std::move(*gpus);
        return proc_gpus(sources.proc_root);
    };
    if (auto it = env.find("CUDA_VISIBLE_DEVICES"); it != env.end()) {
        resources.devices = split_visible_devices(it->second);
        resources.devices_inherited = true;
        if (sources.locate_inherited && !resources.devices.empty())
            resources.device_pci_bus_ids = locate_devices(resources.devices, machine_gpus());
        else
            resources.device_pci_bus_ids.assign(resources.devices.size(), "");
    } else {
        for (const GpuInfo& gpu : machine_gpus()) {
            resources.devices.push_back(std::to_string(gpu.index));
            resources.device_pci_bus_ids.push_back(gpu.pci_bus_id);
        }
    }
    auto allowed = allowed_cpus();
    resources.cpus = allowed.empty()
                         ? static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))
                         : static_cast<int>(allowed.size());
    return resources;
}

}  // namespace ddprun
