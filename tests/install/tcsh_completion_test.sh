#!/usr/bin/env bash
# The generated tcsh completion (build/docs/ddprun.tcsh) in a real tcsh: it
# must be accepted (`complete ddprun` prints its rules), offer every flag of
# `ddprun --help`, and complete as a user sees it on TAB: flags in both
# spellings, the closed sets of values, files, and nothing of ddprun's after
# the program. tcsh edits a line only on a terminal, so each case runs an
# interactive tcsh on a pseudo-terminal (python3's pty): it types the line and
# ^D (list-choices), then the line and TAB, and reads what tcsh listed and
# what the line became. Skipped (77) without tcsh or python3.
#
#   bash tests/install/tcsh_completion_test.sh build/docs/ddprun.tcsh build/ddprun
set -uo pipefail

script=$(realpath "${1:?usage: tcsh_completion_test.sh COMPLETION_SCRIPT DDPRUN}")
ddprun=${2:?usage: tcsh_completion_test.sh COMPLETION_SCRIPT DDPRUN}
for tool in tcsh python3; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool not installed (apt-get install $tool)"
    exit 77
  fi
done

failures=0
fail() {
  echo "FAIL: $*"
  ((failures++))
}

# Accepted: sourcing it defines the rules, and tcsh prints them back.
rules=$(tcsh -f -c "source '$script'; complete ddprun" 2>&1)
if [[ $? -ne 0 || $rules != *"'p/*/f/'"* ]]; then
  echo "FAIL: tcsh did not accept $script: $rules"
  exit 1
fi
[[ $rules == *'C@-@`sh -c "$_ddprun_before_program" && echo $_ddprun_options`@'* ]] \
  || fail "complete ddprun has no rule for ddprun's options: $rules"
# Every flag of --help among the options the rule offers ("  -m, --module  ...").
offered=" $(tcsh -f -c "source '$script'; echo \$_ddprun_options") "
help_flags=0
while read -r -a words; do
  for word in "${words[@]}"; do
    [[ $word == -* ]] || break
    help_flags=$((help_flags + 1))
    [[ $offered == *" ${word%,} "* ]] || fail "--help's ${word%,} is not offered"
    [[ $word == *, ]] || break
  done
done < <("$ddprun" --help | grep '^  -')
((help_flags > 20)) || fail "found only $help_flags flags in ddprun --help"

# The driver: for each LINE, in a fresh tcsh, prints two lines: the words tcsh
# lists for LINE (sorted) and LINE as TAB completes it. One python3 for every
# case (it takes longer to start than all the cases take to run). Each wait is
# for text tcsh prints (the prompt, a marker echoed by a command typed after
# the keys), not for time to pass.
driver='
import fcntl, os, pty, re, select, struct, sys, termios, time

def complete(script, line):
    pid, fd = pty.fork()
    if pid == 0:
        # TERM=dumb would turn the line editor off.
        os.environ.update(TERM="vt100", HOME=os.getcwd())
        os.execvp("tcsh", ["tcsh", "-f", "-i"])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 250, 0, 0))
    deadline = time.monotonic() + 10
    output = b""

    def read_until(pattern, editing):
        """Reads until pattern shows; with editing, until the line editor also
        reads the keys itself (the terminal out of canonical mode): keys typed
        before would reach the terminal driver, which takes ^D for end of file."""
        nonlocal output
        while time.monotonic() < deadline:
            match = re.search(pattern, output)
            if match and not (editing and termios.tcgetattr(fd)[3] & termios.ICANON):
                output = output[match.end():]
                return match
            ready, _, _ = select.select([fd], [], [], 0.05)
            if ready:
                output += os.read(fd, 65536)
        sys.exit("tcsh: %s: no %r in %r" % (line, pattern, output))

    # The markers are split by quotes as typed, so that only what tcsh prints
    # (never its echo of the keys) holds them whole.
    os.write(fd, b"set prompt=\"tc\"\"sh> \"; source %s\n" % script.encode())
    read_until(rb"tcsh> ", True)
    os.write(fd, line.encode() + b"\x04\x15echo LIS\"\"TED\r")
    listing = read_until(rb"(?s)^(.*?)tcsh> .*?LISTED", False).group(1)
    read_until(rb"tcsh> ", True)
    os.write(fd, line.encode() + b"\t\x01echo \x27BEG\x27\x27IN<\x05>E\x27\x27ND\x27\r")
    completed = read_until(rb"BEGIN<(.*?)>END", False).group(1)
    os.write(fd, b"exit\r")
    os.waitpid(pid, 0)
    os.close(fd)

    listing = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]|[\x07\r]", b"", listing)
    # After the line and a line break, the list (or an explanation), then the
    # prompt again; nothing listed: the break and the prompt at once.
    words = listing.split(b"\n", 1)[1].split() if b"\n" in listing else []
    print(" ".join(sorted(set(w.decode() for w in words))))
    print(completed.decode(), flush=True)

for line in sys.argv[2:]:
    complete(sys.argv[1], line)
'
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/logs" && touch "$scratch/train.py" "$scratch/hosts.txt"
cd "$scratch" || exit 1

# The cases, run together at the end.
lines=() kinds=() wants=()
expect() {  # expect "CANDIDATES" LINE: ^D lists exactly these
  kinds+=(listed) wants+=("$1") lines+=("$2")
}
expect_line() {  # expect_line LINE COMPLETED: TAB turns LINE into COMPLETED
  kinds+=(completed) wants+=("$2") lines+=("$1")
}

# Flags, in both spellings.
expect "--rdzv_backend --rdzv_conf --rdzv_endpoint --rdzv_id" 'ddprun --rdzv_'
expect "--rdzv-backend --rdzv-conf --rdzv-endpoint --rdzv-id" 'ddprun --rdzv-'
expect_line 'ddprun --nproc-p' 'ddprun --nproc-per-node '
expect_line 'ddprun --max_r' 'ddprun --max_restarts '
# The closed sets of values, as the next word or after "=".
expect "c10d etcd static" 'ddprun --rdzv_backend='
expect_line 'ddprun --rdzv-backend=e' 'ddprun --rdzv-backend=etcd '
expect "auto cpu gpu" 'ddprun --nproc_per_node '
expect_line 'ddprun --numa-binding s' 'ddprun --numa-binding socket '
expect "SIGURG SIGUSR1 SIGUSR2" 'ddprun --signals_to_handle=SIGTERM,SIGU'
expect "SIGURG SIGUSR1 SIGUSR2" 'ddprun --signals-to-handle SIGTERM,SIGU'
# Free text: nothing to complete, the value's name to read.
expect "ADDR" 'ddprun --master_addr '
# Files and directories where a value is one.
expect_line 'ddprun --log_dir=l' 'ddprun --log_dir=logs/'
expect_line 'ddprun --hostfile h' 'ddprun --hostfile hosts.txt '
# ddprun's options go on after a flag and after an option's value...
expect "--nnodes" 'ddprun --standalone --nnod'
expect "--nnodes" 'ddprun --nproc_per_node 2 --nnod'
expect "--nnodes" 'ddprun -r 3 --max_restarts=1 --nnod'
# ...up to the program, a file.
expect_line 'ddprun --nproc_per_node=2 tr' 'ddprun --nproc_per_node=2 train.py '
expect_line 'ddprun -m tr' 'ddprun -m train.py '
# After the program, its own arguments: never ddprun's flags.
expect "" 'ddprun ./train.py --nnod'
expect "" 'ddprun --nproc_per_node 2 train.py --nnod'
expect "" 'ddprun -- --nnod'
expect_line 'ddprun train.py h' 'ddprun train.py hosts.txt '

mapfile -t results < <(python3 -c "$driver" "$script" "${lines[@]}")
if ((${#results[@]} != 2 * ${#lines[@]})); then
  echo "FAIL: the driver answered ${#results[@]} lines for ${#lines[@]} cases"
  exit 1
fi
for i in "${!lines[@]}"; do
  if [[ ${kinds[i]} == listed ]]; then
    got=${results[2 * i]}
    [[ $got == "${wants[i]}" ]] || fail "${lines[i]} ^D: listed '$got', want '${wants[i]}'"
  else
    got=${results[2 * i + 1]}
    [[ $got == "${wants[i]}" ]] || fail "${lines[i]} <TAB>: the line became '$got', want '${wants[i]}'"
  fi
done

if ((failures > 0)); then
  echo "tcsh completion: $failures failures"
  exit 1
fi
echo "tcsh completion: all checks passed"
