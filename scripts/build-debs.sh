#!/bin/sh
# build-debs.sh [OUTDIR]: the Debian packages libcltrain0, libcltrain-dev,
# libcltrain-fortran0, libcltrain-fortran-dev and cltrain, and the source
# package (format 3.0 (native): cltrain_VERSION.dsc and .tar.xz, which
# `dpkg-source -x` unpacks and dpkg-buildpackage rebuilds), from this tree
# (tracked and untracked, not ignored, files: none of an in-tree build's
# outputs), into OUTDIR (default ./debs), checked by lintian (no errors, no
# warnings). It installs what packaging needs
# (debhelper, lintian) and the build dependencies first, as root or through
# sudo. DEB_BUILD_OPTIONS=nocheck skips the package build's make check.
# Then: sudo apt-get install --reinstall ./debs/*.deb (--reinstall: over an earlier build of the same version)
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-debs}" && cd "${1:-debs}" && pwd)
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

as_root sh "$src/scripts/install-debian-deps.sh"
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
  debhelper dpkg-dev lintian pkgconf

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/cltrain"
(cd "$src" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) | tar -xf - -C "$work/cltrain"
(cd "$work/cltrain" && dpkg-buildpackage -us -uc)
lintian --fail-on error,warning "$work"/cltrain_*.changes
cp "$work"/*.deb "$work"/*.dsc "$work"/*.tar.* "$out"/
ls "$out"
