// ddprun(1) from the option table (see cli_docs.hpp); the completions are in
// cli_completion.cpp.
//
// Why this file exists: a man page or a completion script written by hand
// drifts from the parser the first time a flag is added. Here the options
// section of the man page and every flag a completion offers are loops over
// k_options; the prose around them (the worker environment, exit codes,
// examples) is the contract of README.md and docs/, kept in one place.

#include "cli_docs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <utility>

#include "cli_values.hpp"
#include "ddprun/base/exit_codes.hpp"
#include "ddprun/base/signals.hpp"

namespace ddprun::cli {
namespace {

// ---------------------------------------------------------------------------
// roff

// Text as roff shows it literally: backslashes, minus signs (which groff would
// otherwise print as hyphens, breaking copy and paste of flags) and a leading
// control character.
std::string roff(std::string_view text) {
    std::string out;
    for (char c : text) {
        if (c == '\\')
            out += "\\e";
        else if (c == '-')
            out += "\\-";
        else
            out += c;
    }
    if (out.starts_with('.') || out.starts_with('\'')) out.insert(0, "\\&");
    return out;
}

// A --help section heading as the argument of .SS: no colon, and its quotes
// as roff's own character so that they do not end the argument.
std::string section_title(std::string_view section) {
    std::string title;
    for (char c : roff(section.ends_with(':') ? section.substr(0, section.size() - 1) : section))
        title += c == '"' ? std::string("\\(dq") : std::string(1, c);
    return title;
}

struct Entry {
    std::string_view name;
    std::string_view text;
};

constexpr std::string_view k_description[] = {
    "ddprun starts the workers of a distributed training job on this node with "
    "torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...), prefixes "
    "every line of their output with the rank, supervises them, and stops the whole job, "
    "on every node, as soon as one worker fails. It accepts every torchrun flag unchanged.",
    "Run it once per node. world_size = nnodes * nproc_per_node counts processes, not "
    "machines; rank = node_rank * nproc_per_node + local_rank. --dry-run prints that plan "
    "for the whole job and starts nothing.",
    "Everything after PROGRAM belongs to the program and is passed to it untouched. A *.py "
    "program runs under $PYTHON_EXEC (default python3) with -u; -m runs a module; "
    "--no_python runs the program as it is.",
    "Multi-node jobs meet through a c10d TCPStore that node 0's agent hosts (through the "
    "store plugin, which loads libtorch) or through an etcd v3 cluster "
    "(--rdzv_backend=etcd, no libtorch). Single-node jobs load neither.",
};

constexpr std::string_view k_options_intro =
    "Every long option works in both spellings (--nproc_per_node and --nproc-per-node), as "
    "--flag=value or --flag value, and as a unique prefix (--nproc=8), as with torchrun's "
    "argparse. A flag not given is read from the job file (--config), then DDPRUN_<NAME>, "
    "then PET_<NAME> where the option says so, then from a scheduler (Slurm, Open MPI, "
    "Kubeflow), then takes the default in [brackets]. A job file has one key = value line "
    "per option (TOML or INI, a key is an option's long name in either spelling, no "
    "sections); --write-config writes one. Its unknown keys, bad values and keys that are "
    "for the command line only (dry-run, help, version, config, write-config, lifeline, "
    "preflight) are errors naming the file and the line, exit 2.";

constexpr Entry k_environment_read[] = {
    {"DDPRUN_<NAME>, PET_<NAME>",
     "the value of an option not given on the command line (e.g. PET_NNODES=2, as "
     "torchrun and the Kubeflow operator set them); an empty variable counts as unset"},
    {"LOGLEVEL",
     "DEBUG, INFO, WARNING, ERROR or CRITICAL: the verbosity when neither -v nor -q "
     "is given"},
    {"PYTHON_EXEC", "the interpreter of *.py programs and -m modules (default python3)"},
    {"CUDA_VISIBLE_DEVICES",
     "the devices to share out among the workers (indices, GPU-<uuid> or MIG-<uuid>, kept "
     "verbatim); without it, the GPUs found on the machine"},
    {"SLURM_*, OMPI_COMM_WORLD_*, PMI_*, MASTER_ADDR, MASTER_PORT",
     "under Slurm, mpirun or a Kubeflow PyTorchJob, the node count, node rank, master "
     "address and port, and the job id of the options not given; --dry-run shows each "
     "value's source"},
    {"DDPRUN_STORE_PLUGIN", "the store plugin to load instead of the installed one"},
    {"DDPRUN_OPENSSL_PLUGIN", "the OpenSSL plugin to load instead of the installed one"},
    {"TMPDIR", "where ddprun makes its scratch directory (default /tmp)"},
};

constexpr Entry k_worker_environment[] = {
    {"RANK", "global rank: the node's offset plus the local rank"},
    {"LOCAL_RANK", "local rank on this node (0 with --virtual_local_rank)"},
    {"WORLD_SIZE", "total workers in the job"},
    {"LOCAL_WORLD_SIZE", "workers on this node"},
    {"GROUP_RANK, NODE_RANK", "this node's rank"},
    {"GROUP_WORLD_SIZE, NNODES", "number of nodes"},
    {"ROLE_NAME, ROLE_RANK, ROLE_WORLD_SIZE", "--role, and the same as RANK and WORLD_SIZE"},
    {"MASTER_ADDR, MASTER_PORT", "where rank 0's own store listens"},
    {"CUDA_VISIBLE_DEVICES",
     "this worker's device (every device with --all-devices; unset without GPUs)"},
    {"TORCHELASTIC_RESTART_COUNT", "restarts after a worker failure so far, job-wide"},
    {"TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID", "--max_restarts, --rdzv_id"},
    {"TORCHELASTIC_ERROR_FILE",
     "a per-worker file where torch's @record writes the exception; ddprun shows it"},
    {"DDPRUN_ROUND", "the job-wide round: every restart and membership change increments it"},
    {"DDPRUN_PROGRESS_FD", "with --hang-timeout: each write to this descriptor is a progress beat"},
    {"OMP_NUM_THREADS", "1 when unset and more than one worker per node"},
    {"PYTHONUNBUFFERED", "1 unless set (workers write to pipes)"},
    {"TORCH_NCCL_ASYNC_ERROR_HANDLING",
     "1 unless set (torch < 2.2: export NCCL_ASYNC_ERROR_HANDLING=1)"},
    {"TORCHELASTIC_SIGNALS_TO_HANDLE", "--signals_to_handle, as names"},
};

struct ExitCode {
    std::string_view code;
    std::string_view meaning;
};

std::vector<ExitCode> exit_codes() {
    static const std::string success = std::to_string(exit_code::kSuccess);
    static const std::string usage = std::to_string(exit_code::kUsage);
    static const std::string internal = std::to_string(exit_code::kInternal);
    static const std::string rendezvous = std::to_string(exit_code::kRendezvous);
    static const std::string hang = std::to_string(exit_code::kHang);
    static const std::string unhealthy = std::to_string(exit_code::kUnhealthy);
    static const std::string no_progress = std::to_string(exit_code::kNoProgress);
    static const std::string not_executable = std::to_string(exit_code::kNotExecutable);
    static const std::string not_found = std::to_string(exit_code::kNotFound);
    return {
        {success, "every worker on every node succeeded"},
        {"N",
         "the root-cause worker's exit code (the first failure by time, job-wide), on every "
         "node"},
        {"128+N", "the root-cause worker died of signal N, or ddprun was stopped by signal N"},
        {usage, "usage error: a bad flag, value or environment default, or more workers than GPUs"},
        {internal, "ddprun itself failed (cannot create a pipe, fork, a temporary directory)"},
        {rendezvous,
         "rendezvous failed: join timeout, lost node or store, mismatched "
         "configuration, a record without the job secret's signature"},
        {unhealthy,
         "a node failed its --health-check: a fixed-size job cannot run without it, on every "
         "node; in an elastic job, that node alone. Also a worker in uninterruptible sleep for "
         "TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT, on every node"},
        {no_progress,
         "restarts in a row made no progress (--max-no-progress-restarts), on every node"},
        {hang, "a rank stopped beating for --hang-timeout, on every node"},
        {not_executable, "the program exists but cannot be executed"},
        {not_found, "the program was not found"},
    };
}

constexpr Entry k_examples[] = {
    {"One node, 8 workers:", "ddprun --nproc_per_node=8 ./train --lr 0.1"},
    {"Two nodes, 8 workers each (the same command on both apart from --node_rank):",
     "ddprun --nproc_per_node=8 --nnodes=2 --node_rank=0 --master_addr=node-a ./train --lr 0.1\n"
     "ddprun --nproc_per_node=8 --nnodes=2 --node_rank=1 --master_addr=node-a ./train --lr 0.1"},
    {"The plan of the whole job, starting nothing:",
     "ddprun --dry-run --nnodes=2 --nproc_per_node=2 --master_addr=node-a ./train --lr 0.1"},
    {"Every node with one command, over ssh:", "ddprun --hosts node-a:8,node-b:8 ./train --lr 0.1"},
    {"An elastic job of 2 to 4 nodes meeting through node-a's store:",
     "ddprun --nnodes=2:4 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=node-a:29400 "
     "--rdzv_id=job42 train.py"},
    {"A PyTorch script, one worker per GPU, logs kept:",
     "ddprun --nproc_per_node=gpu --log_dir=/logs ddp_train.py --epochs 3"},
    {"The job's options kept in a file, then run from it (a flag still wins over it):",
     "ddprun --nproc_per_node=8 --max_restarts=3 --write-config job.toml\n"
     "ddprun --config job.toml ./train --lr 0.1"},
};

void roff_entries(std::string& out, std::span<const Entry> entries) {
    for (const Entry& entry : entries)
        out += fmt::format(".TP\n.B {}\n{}\n", roff(entry.name), roff(entry.text));
}

std::string man_option(const OptionSpec& spec) {
    std::string names;
    for (const std::string& spelling : spellings(spec))
        names += fmt::format("{}\\fB{}\\fR", names.empty() ? "" : ", ", roff(spelling));
    if (!is_flag(spec)) names += fmt::format(" \\fI{}\\fR", roff(spec.value_name));
    std::string text = fmt::format(".TP\n{}\n{}\n", names, roff(spec.help));
    std::string suffix = env_suffix(spec.name);
    if (spec.env == EnvDefault::Torchrun)
        text +=
            fmt::format(".br\nEnvironment: DDPRUN_{}, then PET_{}.\n", roff(suffix), roff(suffix));
    else if (spec.env == EnvDefault::Ddprun)
        text += fmt::format(".br\nEnvironment: DDPRUN_{}.\n", roff(suffix));
    return text;
}

}  // namespace

std::vector<std::string> spellings(const OptionSpec& spec) {
    std::vector<std::string> names;
    if (spec.short_name != 0) names.push_back(std::string{'-', spec.short_name});
    names.push_back("--" + std::string(spec.name));
    if (std::string other = "--" + alternate_spelling(spec.name); other != names.back())
        names.push_back(other);
    return names;
}

std::string man_page(std::string_view version) {
    std::string out = fmt::format(
        ".\\\" Generated from ddprun's option table by tools/generate_docs.cpp; do not edit.\n"
        ".TH DDPRUN 1 \"\" \"ddprun {}\" \"User Commands\"\n"
        // Flags and variable names must not be hyphenated or stretched.
        ".nh\n.ad l\n"
        ".SH NAME\n"
        "ddprun \\- launch the workers of a distributed training job (a native torchrun)\n"
        ".SH SYNOPSIS\n"
        ".B ddprun\n"
        "[\\fIoptions\\fR] \\fIPROGRAM\\fR [\\fIARGS\\fR...]\n"
        ".br\n"
        ".B ddprun\n"
        "[\\fIoptions\\fR] \\fB\\-m\\fR \\fIMODULE\\fR [\\fIARGS\\fR...]\n"
        ".SH DESCRIPTION\n",
        roff(version));
    for (std::string_view paragraph : k_description)
        out += fmt::format(".PP\n{}\n", roff(paragraph));

    out += fmt::format(".SH OPTIONS\n{}\n", roff(k_options_intro));
    // Sections in the order they first appear; the table may come back to one.
    std::vector<std::string_view> sections;
    std::vector<const OptionSpec*> hidden;
    for (const OptionSpec& spec : k_options) {
        if (spec.section.empty())
            hidden.push_back(&spec);
        else if (std::find(sections.begin(), sections.end(), spec.section) == sections.end())
            sections.push_back(spec.section);
    }
    for (std::string_view section : sections) {
        out += fmt::format(".SS \"{}\"\n", section_title(section));
        for (const OptionSpec& spec : k_options)
            if (spec.section == section) out += man_option(spec);
    }
    if (!hidden.empty()) {
        out += ".PP\nAlso accepted, so that old launch lines keep working, and ignored:";
        std::string_view separator = " ";
        for (const OptionSpec* spec : hidden) {
            for (const std::string& spelling : spellings(*spec)) {
                out += fmt::format("{}\\fB{}\\fR", separator, roff(spelling));
                separator = ", ";
            }
        }
        out += ".\n";
    }

    out += ".SH ENVIRONMENT\n.SS \"Read by ddprun\"\n";
    roff_entries(out, k_environment_read);
    out += ".SS \"Given to each worker\"\nEach worker inherits ddprun's environment plus:\n";
    roff_entries(out, k_worker_environment);

    out += ".SH \"EXIT STATUS\"\n";
    for (const ExitCode& code : exit_codes())
        out += fmt::format(".TP\n.B {}\n{}\n", roff(code.code), roff(code.meaning));
    out +=
        ".PP\nEvery error is one line, \"ddprun: error: ...\", naming the problem and what "
        "to do.\n";

    out += ".SH EXAMPLES\n";
    for (const Entry& example : k_examples) {
        out += fmt::format(".PP\n{}\n.PP\n.RS 4\n.EX\n", roff(example.name));
        std::string_view lines = example.text;
        while (!lines.empty()) {
            auto newline = lines.find('\n');
            out += roff(lines.substr(0, newline)) + "\n";
            if (newline == std::string_view::npos) break;
            lines.remove_prefix(newline + 1);
        }
        out += ".EE\n.RE\n";
    }

    out +=
        ".SH FILES\n"
        ".TP\n.I /usr/lib/ddprun/libddprun_store.so\n"
        "The store plugin of multi-node c10d jobs: libtorch's TCPStore. ddprun looks for it "
        "beside its own binary, then in the install's plugin directory relative to the "
        "binary; \\fBddprun \\-\\-version\\fR says which one it would load, and which "
        "libtorch that would bring in.\n"
        ".SH \"SEE ALSO\"\n"
        ".BR mpirun (1),\n.BR srun (1),\n.BR ssh (1)\n"
        ".PP\nThe README (/usr/share/doc/ddprun/README.md in the Debian package) is the "
        "front page; the pages beside it in /usr/share/doc/ddprun/docs/ cover the rest in "
        "full: install.md (installing and building), environment.md (what workers get), "
        "output.md and events.md (output and the event log), failures.md (failures, "
        "signals, restarts), hangs.md (\\-\\-hang\\-timeout, FileTimer), multi\\-node.md "
        "(\\-\\-hosts), schedulers.md (Slurm, Kubeflow, mpirun), elastic.md (elastic jobs), "
        "etcd.md (the etcd backend), security.md (the job secret), reliability.md, "
        "benchmarks.md and scale.md.\n";
    return out;
}

}  // namespace ddprun::cli
