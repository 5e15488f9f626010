#!/usr/bin/env zsh
# Drives the generated zsh completion (build/docs/_ddprun) the way a user
# does, in an interactive zsh on a pseudo-terminal (zsh/zpty): each case
# types a line and TAB, then a key whose widget prints the line's buffer
# after a marker, so the test waits for that marker instead of for time to
# pass. The candidates are what zsh listed in between; a single match shows
# as the completed buffer.
#
#   zsh tests/install/zsh_completion_test.zsh build/docs
emulate -L zsh
setopt err_return no_unset extended_glob

dir=${1:?usage: zsh_completion_test.zsh COMPLETION_DIR}
dir=${dir:A}
zmodload zsh/zpty || { print "SKIP: no zsh/zpty module"; exit 77 }

scratch=$(mktemp -d)
trap 'rm -rf $scratch' EXIT
mkdir $scratch/logs && touch $scratch/train.py $scratch/hosts.txt
cd $scratch

failures=0
typeset -g buffer
typeset -ga candidates

# complete LINE: types LINE and TAB in a fresh interactive zsh, sets $buffer
# to the line after completion and $candidates to the words zsh listed (an
# option's description cut off).
complete() {
  local line=$1 out
  zpty ddprun_test zsh -f -i
  # Lists at the first TAB when ambiguous, never cycles through a menu.
  zpty -w ddprun_test "PS1='> '; fpath=($dir \$fpath); autoload -Uz compinit; compinit -u -D;" \
    "setopt no_beep no_list_ambiguous no_prompt_sp; unsetopt auto_menu menu_complete; LISTMAX=0; COLUMNS=250;" \
    "mark() { zle -I; print -r -- \"MARK<\$BUFFER>END\"; BUFFER=''; }; zle -N mark;" \
    "bindkey '^Xm' mark; zle-line-init() { print -n STARTED''EDITING; }; zle -N zle-line-init"
  # Typed before the line editor runs, the line would be echoed by the
  # terminal: wait for it (the setup's own echo holds STARTED''EDITING, not
  # what it prints).
  zpty -r -m ddprun_test out '*STARTEDEDITING*' || { print "FAIL: zsh did not start"; exit 1 }
  zpty -w -n ddprun_test "$line"$'\t\C-Xm'
  if ! zpty -r -m ddprun_test out '*MARK<*>END*'; then
    print "FAIL: $line <TAB>: no answer"
    zpty -d ddprun_test
    exit 1
  fi
  zpty -d ddprun_test
  # Every terminal control sequence moves the cursor: a line break.
  out=${out//$'\e'\[[0-9;?]#[a-zA-Z]/$'\n'}
  out=${out//$'\r'/}
  out=${out//?$'\b'/}
  buffer=${${out##*MARK<}%%>END*}
  candidates=()
  local listing_line
  # The listing comes after the typed line's echo and before the mark.
  local listing=${${out%%MARK<*}#*"$line"}
  for listing_line in ${(f)listing}; do
    [[ $listing_line == *"$line"* || $listing_line == '> '* ]] && continue
    candidates+=(${=${listing_line%% -- *}})
  done
  candidates=(${(ou)candidates})
}

expect() {  # expect "CANDIDATES" LINE: exactly these are listed
  complete $2
  if [[ ${(j: :)candidates} != $1 ]]; then
    print "FAIL: $2 <TAB>: listed '${(j: :)candidates}', want '$1'"
    failures=$((failures + 1))
  fi
}
expect_has() {  # expect_has "CANDIDATES" LINE: at least these are listed
  complete $2
  local want
  for want in ${=1}; do
    if (( ! ${candidates[(Ie)$want]} )); then
      print "FAIL: $2 <TAB>: '$want' not in '${(j: :)candidates}'"
      failures=$((failures + 1))
    fi
  done
}
expect_line() {  # expect_line LINE COMPLETED: TAB completes LINE to COMPLETED
  complete $1
  if [[ $buffer != $2 ]]; then
    print "FAIL: $1 <TAB>: the line became '$buffer', want '$2'"
    failures=$((failures + 1))
  fi
}

# Flags, in both spellings.
expect "--rdzv_backend --rdzv_conf --rdzv_endpoint --rdzv_id" 'ddprun --rdzv_'
expect "--rdzv-backend --rdzv-conf --rdzv-endpoint --rdzv-id" 'ddprun --rdzv-'
expect_line 'ddprun --nproc-p' 'ddprun --nproc-per-node='
expect_line 'ddprun --max_r' 'ddprun --max_restarts='
# The closed sets of values.
expect "c10d etcd static" 'ddprun --rdzv_backend='
expect_line 'ddprun --rdzv-backend=e' 'ddprun --rdzv-backend=etcd '
expect "auto cpu gpu" 'ddprun --nproc_per_node='
expect_line 'ddprun --numa-binding=s' 'ddprun --numa-binding=socket '
expect "SIGURG SIGUSR1 SIGUSR2" 'ddprun --signals_to_handle=SIGTERM,SIGU'
# Files and directories where a value is one.
expect_line 'ddprun --log_dir=' 'ddprun --log_dir=logs/'
expect_line 'ddprun --hostfile=h' 'ddprun --hostfile=hosts.txt '
# The program: a file or a command.
expect_has "train.py true" 'ddprun --nproc_per_node=2 tr'
expect_has "train.py" 'ddprun -m tr'
# After the program, its own arguments: never ddprun's flags.
expect_line 'ddprun ./train.py --nnod' 'ddprun ./train.py --nnod'
expect "" 'ddprun ./train.py --nnod'

if ((failures > 0)); then
  print "zsh completion: $failures failures"
  exit 1
fi
print "zsh completion: all checks passed"
