#!/usr/bin/env bash
# Builds the Debian package, ddprun_<version>_<arch>.deb, with CPack from the
# same tree and install rules as `cmake --install` (cmake/Install.cmake,
# cmake/Packaging.cmake), then checks it with lintian.
#
# Depends are computed by dpkg-shlibdeps from what /usr/bin/ddprun and the
# OpenSSL plugin (etcd jobs, job secrets: part of every install) link; the
# store plugin's own libraries (libtorch) become Recommends: single-node and
# etcd jobs never load them, so a machine without libtorch still gets a
# working ddprun.
#
#   bash scripts/package.sh                   # builds in build-pkg/, writes dist/ddprun_*.deb
#   BUILD_DIR=build bash scripts/package.sh   # reuse a build as configured (scripts/test.sh does)
#   OUT_DIR=/tmp/out JOBS=1 bash scripts/package.sh
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir=${BUILD_DIR:-build-pkg}
out_dir=${OUT_DIR:-dist}
jobs=${JOBS:-$(nproc)}

bash scripts/install-deps.sh

# The package installs under /usr: that prefix is what picks zsh's
# vendor-completions directory (cmake/InstallLayout.cmake).
# CMAKE_SKIP_INSTALL_ALL_DEPENDENCY: cpack installs without first building
# every target (the tests and benchmarks are not packaged); the ones packaged
# are built just below.
# A build directory already configured keeps its build type and flags.
build_type_args=()
[[ -f $build_dir/CMakeCache.txt ]] || build_type_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
cmake -S . -B "$build_dir" "${build_type_args[@]}" -DDDPRUN_WERROR=ON \
  -DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON >/dev/null
targets=(ddprun ddprun_openssl docs)
# (Read whole first: grep -q would stop reading early, and pipefail would see cmake's SIGPIPE.)
available_targets=$(cmake --build "$build_dir" --target help)
if grep -qw ddprun_store <<<"$available_targets"; then
  targets+=(ddprun_store)
else
  echo "package: libtorch not found, the package will have no store plugin (no multi-node c10d jobs)" >&2
fi
cmake --build "$build_dir" --target "${targets[@]}" -j"$jobs"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
DESTDIR="$work/root" cmake --install "$build_dir" --prefix /usr >/dev/null

# dpkg-shlibdeps runs where a source package would be: it wants debian/control.
mkdir -p "$work/debian" && touch "$work/debian/control"
shlibs_of() {
  (cd "$work" && dpkg-shlibdeps -O "$@" 2>/dev/null) | sed -n 's/^shlibs:Depends=//p'
}
openssl_plugin=$(find "$work/root" -name libddprun_openssl.so)
[[ -n $openssl_plugin ]] || { echo "package: the install has no libddprun_openssl.so" >&2; exit 1; }
depends=$(shlibs_of -e"$work/root/usr/bin/ddprun" -e"$openssl_plugin")
[[ -n $depends ]] || { echo "package: dpkg-shlibdeps found no dependencies of ddprun" >&2; exit 1; }
[[ $depends == *libssl3* ]] || { echo "package: Depends lacks libssl3: $depends" >&2; exit 1; }
recommends=""
plugin=$(find "$work/root" -name libddprun_store.so)
if [[ -n $plugin ]]; then
  # The plugin's packages that ddprun itself does not already depend on.
  depends_names=" $(sed -E 's/ \([^)]*\)//g; s/,//g' <<<"$depends") "
  while IFS= read -r item; do
    item=$(sed -E 's/^ +| +$//g' <<<"$item")
    [[ -n $item ]] || continue
    [[ $depends_names == *" ${item%% *} "* ]] && continue
    recommends+="${recommends:+, }$item"
  done < <(shlibs_of -e"$plugin" | tr ',' '\n')
fi
echo "package: Depends: $depends"
echo "package: Recommends: ${recommends:-(none)}"

(cd "$build_dir" && cpack -G DEB -B "$work/cpack" \
  -D CPACK_DEBIAN_PACKAGE_DEPENDS="$depends" \
  -D CPACK_DEBIAN_PACKAGE_RECOMMENDS="$recommends" >/dev/null)
mkdir -p "$out_dir"
deb=$(find "$work/cpack" -maxdepth 1 -name 'ddprun_*.deb')
[[ -n $deb ]] || { echo "package: cpack wrote no ddprun_*.deb" >&2; exit 1; }
cp "$deb" "$out_dir/"
deb=$out_dir/$(basename "$deb")

dpkg-deb --info "$deb"
dpkg-deb --contents "$deb"

# lintian: errors and warnings fail the build. Suppressed, for its reason:
#  - hardening-no-bindnow (an info tag): -z now would resolve every symbol at
#    each start; ddprun is exec'd thousands of times a day and starts lazily
#    on purpose (bench/run.sh (m)).
# Info tags that remain, each harmless: binary-has-unneeded-section .comment
# (the compiler's version string, which strip keeps); hardening-no-fortify-
# functions on the store plugin, built with _FORTIFY_SOURCE like the rest
# (cmake/Hardening.cmake), whose only fortifiable calls are std::string's
# memcpy with sizes known at run time, so there is nothing to check.
if command -v lintian >/dev/null; then
  lintian --fail-on error,warning --suppress-tags hardening-no-bindnow "$deb"
  echo "package: lintian: no errors or warnings"
else
  echo "package: lintian not installed; skipped (apt-get install lintian)" >&2
fi
echo "package: $deb"
