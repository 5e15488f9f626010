// NVML, loaded at run time: the GPUs of this machine with their UUIDs and PCI
// bus ids, without linking CUDA or NVML (ddprun must start on machines with no
// driver at all, and in milliseconds on those without a GPU).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ddprun {

struct GpuInfo {
    int index = 0;           // NVML's index: PCI bus order, as CUDA_DEVICE_ORDER=PCI_BUS_ID
    std::string uuid;        // "GPU-8f2a...", "" if NVML would not say
    std::string pci_bus_id;  // sysfs form "0000:3b:00.0" (NVML's "00000000:3B:00.0" normalized)
};

// Every GPU NVML reports, in NVML index order. nullopt when `library` cannot
// be loaded, lacks a needed symbol, or nvmlInit fails (no driver, no device
// nodes in a container): the caller falls back to /proc. A test passes the
// path of a fake library.
std::optional<std::vector<GpuInfo>> query_nvml(const std::string& library = "libnvidia-ml.so.1");

}  // namespace ddprun
