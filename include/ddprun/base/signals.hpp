// Signals: their names (one table for messages and for --signals_to_handle)
// and the masks ddprun's processes run with. Every signal ddprun reacts to is
// blocked and read synchronously (sigwaitinfo in the supervisor, a signalfd in
// the agent), so no handler ever runs and none can be lost between checks.
#pragma once

#include <signal.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

// "SIGSEGV" for 11, "signal 77" for numbers without a name.
std::string signal_name(int signal);

// "SIGTERM", "TERM" or "term" -> 15; nullopt for an unknown name. Numbers are
// the caller's business (which range is valid depends on the use).
std::optional<int> signal_number(std::string_view name);

// Blocks `signals` in the calling thread and returns the previous mask.
// Throws std::system_error if the mask cannot be changed.
sigset_t block_signals(const std::vector<int>& signals);

// Whether `signal` is ignored (SIG_IGN) in this process now: what nohup and
// `trap '' HUP` leave to the programs they start.
bool signal_ignored(int signal);

// The signal the agent receives when its supervisor dies (PR_SET_PDEATHSIG).
int parent_death_signal();

}  // namespace ddprun
