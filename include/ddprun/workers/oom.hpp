// Whether the kernel's OOM killer ended a worker. A worker killed by it dies of
// SIGKILL like one killed by anyone else; the kernel tells them apart only in
// the memory cgroup's counter of OOM kills (cgroup v2 `memory.events`, v1
// `memory.oom_control`: "oom_kill N"), which counts every OOM kill of a
// process of that cgroup, whether its own limit, an ancestor's (a Slurm job's)
// or the whole machine ran out. The workers are in ddprun's own cgroup (they
// inherit it); OomWatch reads its counter when they start and when one dies of
// SIGKILL. Where there is no counter to read, nothing is said.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ddprun {

struct MemoryCgroup {
    int version = 0;    // 1 or 2
    std::string name;   // as /proc/PID/cgroup names it: "/slurm/uid_0/job_42"
    std::string dir;    // its directory: "/sys/fs/cgroup/memory/slurm/uid_0/job_42"
    std::string mount;  // where its hierarchy is mounted (the walk up stops there)
};

// The memory cgroup that `proc_cgroup` (the text of /proc/PID/cgroup) names,
// where `mountinfo` (/proc/self/mountinfo) mounts it: the v1 "memory" line when
// there is one, else the v2 "0::" line. nullopt when no mount holds it.
std::optional<MemoryCgroup> parse_memory_cgroup(std::string_view proc_cgroup,
                                                std::string_view mountinfo);

// The N of an "oom_kill N" line (memory.events, memory.oom_control).
std::optional<std::uint64_t> parse_oom_kills(std::string_view text);

// "/slurm/uid_0/job_42: limit 64 GiB", "/a/b: limit 50 MiB (of /a)" when the
// nearest limit is an ancestor's, "/a/b: no limit" when none is set up to the
// hierarchy's root.
std::string describe_memory_limit(const MemoryCgroup& cgroup);

// The counter of one cgroup, kept between a round's start and its workers'
// exits.
class OomWatch {
  public:
    // Reads ddprun's own memory cgroup and its counter, for the workers about to
    // start. Nothing to read: every later question gets nullopt.
    void arm();

    // For a worker that died of SIGKILL: "killed by the kernel's OOM killer
    // (memory cgroup ...)" when the counter rose since arm() by more than the
    // kills already told, else nullopt.
    std::optional<std::string> explain_sigkill();

  private:
    std::optional<MemoryCgroup> m_cgroup;
    std::uint64_t m_baseline = 0;
    std::uint64_t m_told = 0;
};

}  // namespace ddprun
