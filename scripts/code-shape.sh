#!/usr/bin/env bash
# The code's shape, for a review before and after a redesign: the longest
# functions, the places that spell a store key of the run, the fields of the two
# largest classes, and which src/ folder includes which. Reads the sources only
# (Universal Ctags and grep); builds and runs nothing.
#
#   bash scripts/code-shape.sh            # every section
#   TOP=30 bash scripts/code-shape.sh     # the 30 longest functions
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
top=${TOP:-15}

echo "## The $top longest functions (lines)"
ctags -R --languages=C++ --kinds-C++=f --fields=+ne -o - src plugin 2>/dev/null |
  awk -F'\t' '{ line = end = 0; scope = ""
    for (i = 4; i <= NF; i++) {
      if ($i ~ /^line:/) line = substr($i, 6)
      if ($i ~ /^end:/) end = substr($i, 5)
      if ($i ~ /^(class|struct|namespace):/) { scope = $i; sub(/^[a-z]+:/, "", scope) }
    }
    if (end > 0) printf "%5d  %s:%d  %s%s\n", end - line + 1, $2, line, (scope == "" ? "" : scope "::"), $1 }' |
  sed 's/ddprun:://g; s/__anon[0-9a-f]*:://g' | sort -rn | awk -v top="$top" 'NR <= top'

echo
echo "## Places that spell a key of the run (\"ddprun/...\" in code, comments left out)"
grep -rn --include='*.cpp' --include='*.hpp' '"ddprun/' src plugin include |
  grep -v '^[^:]*:[0-9]*: *//' | grep -v '#include' || true

echo
echo "## Fields, and the files that define the class's functions"
in_class() { # in_class KINDS CLASS: the file of each tag of those kinds in CLASS, a count each
  ctags -R --languages=C++ --kinds-C++="$1" --fields=+s -o - src include 2>/dev/null |
    awk -F'\t' -v c="$2" '{ for (i = 4; i <= NF; i++) if ($i == "class:ddprun::" c || $i == "struct:ddprun::" c) print $2 }' |
    sort | uniq -c | awk '{ n += $1; files++; f = f " " $2 "(" $1 ")" } END { printf "%d in %d file(s):%s", n, files, f }'
}
for class in 'Agent::Impl' Coordinator; do
  echo "$class: fields $(in_class m "$class")"
  echo "$class: functions $(in_class f "$class")"
done

echo
echo "## Folder graph (src/<from> includes ddprun/<to>)"
for dir in src/*/; do
  from=$(basename "$dir")
  to=$(grep -rhoE '#include "ddprun/[a-z_]+/' "$dir" "include/ddprun/$from" 2>/dev/null |
    sed -E 's|.*ddprun/([a-z_]+)/|\1|' | sort -u | grep -vx "$from" | tr '\n' ' ' || true)
  echo "$from -> ${to:-(none)}"
done
