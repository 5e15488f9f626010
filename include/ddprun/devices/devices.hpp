// Devices: the GPU list workers are given. The inherited CUDA_VISIBLE_DEVICES
// wins (kept verbatim: indices, GPU-<uuid>, MIG-<uuid>); otherwise the GPUs
// NVML reports (dlopen'ed, never linked), else those the driver lists under
// /proc, else none. Each device's PCI bus id comes along where a source knows
// it, for --numa-binding. The roots and the library are seams for tests.
#pragma once

#include <string>
#include <vector>

#include "ddprun/base/environment.hpp"
#include "ddprun/base/error.hpp"
#include "ddprun/config/config.hpp"
#include "ddprun/devices/nvml.hpp"

namespace ddprun {

// Where node_resources looks.
struct DeviceSources {
    std::string proc_root = "/proc";
    std::string nvml_library = "libnvidia-ml.so.1";  // "": do not try NVML
    // Also place the entries of an inherited CUDA_VISIBLE_DEVICES (find their
    // bus ids). Costs an NVML init, which can take a second on a machine
    // without the persistence daemon, so only --numa-binding asks for it.
    bool locate_inherited = false;
};

// Splits a CUDA_VISIBLE_DEVICES value; empty entries are dropped. A value of
// "" or "-1" (no device) gives an empty list that still counts as inherited.
std::vector<std::string> split_visible_devices(const std::string& value);

// The GPUs under <proc_root>/driver/nvidia/gpus in PCI bus order (NVML's and,
// on machines of one GPU model, CUDA's index order), with the UUID and bus id
// of each one's `information` file where it gives them.
std::vector<GpuInfo> proc_gpus(const std::string& proc_root = "/proc");

// Indices "0".."n-1" of the GPUs listed under <proc_root>/driver/nvidia/gpus.
std::vector<std::string> discover_gpus(const std::string& proc_root = "/proc");

// The PCI bus id of each CUDA_VISIBLE_DEVICES entry among `gpus`, "" where
// none matches. An index names the GPU of that index; GPU-<uuid> (or a unique
// prefix of one, as CUDA accepts) and the legacy MIG-GPU-<uuid>/gi/ci name
// the GPU of that UUID; a MIG-<uuid> cannot be placed without more of NVML.
std::vector<std::string> locate_devices(const std::vector<std::string>& entries,
                                        const std::vector<GpuInfo>& gpus);

// Devices (with their bus ids) and CPU count of this node.
NodeResources node_resources(const Environment& env, const DeviceSources& sources = {});

}  // namespace ddprun
