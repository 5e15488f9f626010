// LaunchConfig: the validated, plain description of one ddprun invocation.
// The CLI produces it (cli.hpp), everything else only reads it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace ddprun {

// How --nproc_per_node was given: a number, or a word resolved on the node.
enum class NprocKind { Count, Gpu, Cpu, Auto };

struct NprocSpec {
    NprocKind kind = NprocKind::Count;
    int count = 1;  // meaningful for NprocKind::Count
};

// Which std streams of a worker a -r/--redirects or -t/--tee value covers.
enum StreamMask : unsigned { kNone = 0, kStdout = 1, kStderr = 2, kBoth = 3 };

// torchrun's "3" or "0:1,1:2" (per local rank) syntax, resolved.
struct StreamSelection {
    unsigned all = kNone;              // applies to local ranks not in per_rank
    std::map<int, unsigned> per_rank;  // local_rank -> StreamMask
    unsigned for_rank(int local_rank) const {
        auto it = per_rank.find(local_rank);
        return it == per_rank.end() ? all : it->second;
    }
};

// --numa-binding: where a worker runs relative to its GPU (binding.hpp).
enum class NumaBinding {
    None,
    Node,         // every CPU of the GPU's NUMA node
    Socket,       // every CPU of the socket holding that node
    Exclusive,    // the node's physical cores split among the workers whose GPUs share it
    CoreComplex,  // the CPUs that share one L3 cache (a core complex) near the GPU
};

// How the program is started.
enum class ProgramKind {
    Executable,    // run argv[0] directly (a binary, a script with a shebang, or --no_python)
    PythonFile,    // *.py: $PYTHON_EXEC (or python3) -u file.py args
    PythonModule,  // -m pkg.mod: $PYTHON_EXEC (or python3) -u -m pkg.mod args
};

// How an agent reaches a secured etcd (--rdzv_backend=etcd only): torchrun's
// etcd-v2 names for TLS, and etcd's own user/password authentication. The
// CLI checks the combination; prepare_launch() reads the files (launch.hpp).
struct EtcdAccess {
    bool https = false;         // protocol=https (default http)
    std::string ca_cert;        // the CA that signed etcd's certificate; empty: the system's
    std::string ssl_cert;       // a client certificate (mutual TLS), with
    std::string ssl_cert_key;   // its private key
    std::string user;           // user=NAME: authenticate as this etcd user, with
    std::string password_file;  // the password in this file (never on the command line)
    bool given() const { return https || !user.empty(); }
};

// --rdzv_conf, typed and validated once by the CLI. Durations are positive;
// keys ddprun does not use are kept in `other` (torchrun passes them on to its
// backend, so they are accepted, not refused).
struct RendezvousSettings {
    // Whether this agent hosts the store: empty means node 0 does (or, with
    // ranks assigned at join, the first agent on the endpoint's machine).
    std::optional<bool> is_host;
    std::chrono::milliseconds join_timeout{600000};
    std::chrono::milliseconds read_timeout{60000};  // one store operation, and connecting
    std::chrono::milliseconds heartbeat_timeout{15000};
    std::chrono::milliseconds exit_barrier_timeout{300000};
    std::chrono::milliseconds last_call_timeout{30000};
    std::chrono::milliseconds close_timeout{30000};
    EtcdAccess etcd;          // protocol, ca_cert, ssl_cert, ssl_cert_key, user, password_file
    std::string secret_file;  // the job secret's file (job_secret.hpp); the secret, never here
    std::map<std::string, std::string> other;
};

// --hosts / --hostfile: this ddprun is the launcher of a job over ssh, not one
// of its agents (fan_out.hpp). Hosts are planned by host_plan.hpp.
struct FanOutSettings {
    std::string hosts;               // --hosts, as given
    std::string hostfile;            // --hostfile, a path
    std::string include, exclude;    // DeepSpeed's --include / --exclude
    std::string ssh_command;         // --ssh-command; empty: "ssh"
    std::string remote_ddprun;       // --remote-ddprun; empty: this ddprun's own path
    std::vector<std::string> env;    // --env NAME[=VALUE], in the order given
    bool nnodes_given = false;       // --nnodes: must then be the number of hosts
    bool master_addr_given = false;  // --master_addr (else the first host is the master)
    bool rdzv_endpoint_given = false;
    bool rdzv_id_given = false;
    // The options every agent gets as they were resolved here ("--name=value" or
    // "--flag"): all but the launcher's own and those it sets per host (nnodes,
    // node_rank, nproc_per_node, local_addr, master_addr, rdzv_endpoint, rdzv_id).
    std::vector<std::string> agent_options;
    bool given() const { return !hosts.empty() || !hostfile.empty(); }
};

struct LaunchConfig {
    // Job shape. An elastic job (--nnodes=MIN:MAX, min_nnodes < nnodes) runs
    // with any node count from min_nnodes to nnodes, re-formed as nodes come
    // and go (elastic.hpp); nnodes is MAX.
    int nnodes = 1;
    int min_nnodes = 1;
    bool elastic() const { return min_nnodes < nnodes; }
    NprocSpec nproc_per_node;
    std::optional<int> node_rank;  // empty: assigned at rendezvous (single node: 0)

    // Where rank 0's own store listens (MASTER_ADDR / MASTER_PORT for workers).
    std::string master_addr = "127.0.0.1";
    std::optional<int> master_port;  // empty or 0: pick a free port

    // Rendezvous between agents (multi-node).
    std::string rdzv_backend = "static";
    std::string rdzv_endpoint;  // host[:port]; empty: master_addr:29400
    std::string rdzv_id = "none";
    RendezvousSettings rendezvous;  // --rdzv_conf
    bool standalone = false;
    std::string local_addr;  // this node's address as the others reach it; empty: hostname

    // Supervision.
    int max_restarts = 0;
    double monitor_interval = 0.1;  // accepted for compatibility; supervision is event-driven
    std::chrono::milliseconds shutdown_timeout{30000};
    std::vector<int> stop_signals;     // signals that stop the job (forwarded first)
    std::vector<int> forward_signals;  // signals only forwarded (SIGUSR1/SIGUSR2 by default)
    // Default signals ddprun leaves alone: they were ignored when it started (nohup, trap ''
    // HUP), so they stay ignored for ddprun and its workers. Never one named by the user.
    std::vector<int> ignored_signals;
    // --hang-timeout / --hang-timeout-first (hang_monitor.hpp): 0 is off. With it on,
    // every worker gets DDPRUN_PROGRESS_FD, and Python workers PYTHONFAULTHANDLER=1.
    std::chrono::milliseconds hang_timeout{0};
    std::optional<std::chrono::milliseconds> hang_timeout_first;
    // --max-no-progress-restarts / --progress-file: after this many restarts in a row
    // whose failed round made no progress job-wide (no rank beat on DDPRUN_PROGRESS_FD,
    // no node saw the progress file change) the job stops with kNoProgress; 0 is off.
    int max_no_progress_restarts = 0;
    std::string progress_file;
    // --report-lines: ECMAScript regexes; a failed rank's stderr lines that match
    // one are kept for its summary (stderr_tail.hpp), however far up they were.
    std::vector<std::string> report_lines;
    // --duplicate-stdout-filters / --duplicate-stderr-filters (torchrun 2.x): a line of a
    // tee'd stream that contains one of these is copied, prefixed, to filtered_stdout.log /
    // filtered_stderr.log in the round's log directory, and a failed rank's matching stderr
    // lines go in its summary as with --report-lines. Empty: none.
    std::vector<std::string> duplicate_stdout_filters;
    std::vector<std::string> duplicate_stderr_filters;
    // --collapse-lines / --collapse-window: lines several local ranks print alike
    // within the window are shown once with their ranks (log_mux.hpp).
    bool collapse_lines = false;
    std::chrono::milliseconds collapse_window{150};
    // --health-check / --health-check-timeout (health_check.hpp): run by each agent before
    // each join; a node whose check fails or outlasts the timeout stays out. "": none.
    std::string health_check;
    std::chrono::milliseconds health_check_timeout{60000};
    // --metrics-port (metrics_server.hpp): each agent serves /metrics and /healthz there,
    // on --local_addr when given, else on every address; 0 picks a free port.
    std::optional<int> metrics_port;
    // --straggler-fraction / --straggler-window (straggler.hpp): with --hang-timeout, node 0
    // names a rank whose step rate stays below fraction x the median for the window; 0: off.
    double straggler_fraction = 0.5;
    std::chrono::milliseconds straggler_window{60000};
    // Whether the workers get DDPRUN_PROGRESS_FD: for hangs, or for progress.
    bool reads_beats() const { return hang_timeout.count() > 0 || max_no_progress_restarts > 0; }

    // Workers.
    std::string role = "default";
    bool virtual_local_rank = false;
    bool all_devices = false;  // every worker sees the whole device list (torchrun's behaviour)
    // CPU placement (binding.hpp). Worker i is pinned before exec; with
    // binding on, OMP_NUM_THREADS defaults to the number of CPUs it gets.
    NumaBinding numa_binding = NumaBinding::None;  // --numa-binding
    // --broadcast-signals: a forwarded-only signal (SIGUSR1/SIGUSR2) that reaches one agent
    // is passed to every node's workers through the store (scheduler preemption notices).
    bool broadcast_signals = false;
    bool cpu_binding = false;  // --cpu-binding: allowed cores split evenly, no GPU needed
    ProgramKind program_kind = ProgramKind::Executable;
    std::string program;            // path, script or module name, as given
    std::vector<std::string> args;  // everything after the program, untouched

    // Output.
    std::string log_dir;  // empty: no per-rank log files
    StreamSelection redirects;
    StreamSelection tee;
    std::optional<std::set<int>> local_ranks_filter;  // empty: every local rank on the console
    std::string log_prefix = "[{rank}]: ";            // empty: no prefix

    // ddprun's own.
    FanOutSettings fan_out;  // --hosts / --hostfile and what goes with them
    // --lifeline: this agent was started by a --hosts launcher; its standard
    // input is the launcher's link: end of file stops the job at once (the
    // launcher or its ssh is gone), a line "signal N" acts as signal N.
    bool lifeline = false;
    // --preflight: check that this node could run the job (program, devices,
    // the store's port on node 0), print "ddprun-preflight VERSION", start nothing.
    bool preflight = false;
    bool dry_run = false;
    // --event-log: one JSON line per event of this node's part of the job, appended
    // (event_log.hpp, docs/events.md); empty: none.
    std::string event_log;
    int verbosity = 0;  // -1 quiet (errors only), 0 info, 1 debug, 2 trace

    // Where the job's shape came from, for the log and --dry-run, so a user can
    // check an allocation before spending GPU hours: the scheduler whose
    // environment filled what the user left open ("slurm", "mpi", "kubeflow",
    // or "" for none), and for nnodes, node_rank, nproc_per_node, master_addr
    // and master_port, in that order, "value (source)", e.g.
    // {"nnodes", "2 (SLURM_NNODES)"}, {"node_rank", "1 (flag --node_rank)"}.
    std::string scheduler;
    std::vector<std::pair<std::string, std::string>> value_sources;
};

// "4", or "2:8" for an elastic job, as --nnodes takes it.
inline std::string nnodes_text(int min_nnodes, int max_nnodes) {
    if (min_nnodes == max_nnodes) return std::to_string(max_nnodes);
    return std::to_string(min_nnodes) + ":" + std::to_string(max_nnodes);
}

// "8", "gpu", "cpu" or "auto", as --nproc_per_node takes it.
inline std::string nproc_text(const NprocSpec& spec) {
    switch (spec.kind) {
        case NprocKind::Gpu:
            return "gpu";
        case NprocKind::Cpu:
            return "cpu";
        case NprocKind::Auto:
            return "auto";
        case NprocKind::Count:
            break;
    }
    return std::to_string(spec.count);
}

// The --nproc_per_node value resolved against this machine's devices and CPUs.
struct NodeResources {
    std::vector<std::string> devices;  // CUDA_VISIBLE_DEVICES entries, verbatim
    bool devices_inherited = false;    // true: from the inherited CUDA_VISIBLE_DEVICES
    // Per entry of `devices`: its PCI bus id in sysfs form ("0000:3b:00.0"),
    // or "" when unknown (an index or UUID no driver source could place, a
    // MIG instance). Where --numa-binding finds a GPU's NUMA node.
    std::vector<std::string> device_pci_bus_ids;
    int cpus = 1;
};

}  // namespace ddprun
