#!/usr/bin/env bash
# Builds onejob's release artifacts, which install without a compiler:
#
#   onejob-VERSION-TARGET.tar.gz (+ .sha256)   the binary, the systemd units, a starting
#                                               config, shell completions, the licences
#   onejob_VERSION-1_ARCH.deb (+ .sha256)       the same as a Debian package: /usr/bin/onejob,
#                                               the units, /etc/onejob/onejob.toml, a
#                                               `onejob` system user
#
# Usage: scripts/release.sh [--binary PATH] [--out DIR]
#   --binary PATH  package this onejob binary (default: `cargo build --release --locked -p
#                  onejob`, then the one in the cargo target directory)
#   --out DIR      where the artifacts go (default: dist/)
#
# The tarball's layout is what `cargo binstall onejob` expects ([package.metadata.binstall]
# in crates/onejob/Cargo.toml) once it is attached to a GitHub release named vVERSION.
# The .deb is built with dpkg-deb (Debian's own tool); crates/onejob/tests/api/release.rs
# installs it on this machine, runs it, and removes it.
set -euo pipefail
cd "$(dirname "$0")/.."

binary=""
out="dist"
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "release.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
target=$(rustc -vV 2>/dev/null | sed -n 's/^host: //p')
target=${target:-x86_64-unknown-linux-gnu}
arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)

if [ -z "$binary" ]; then
  cargo build --release --locked -p onejob
  binary="${CARGO_TARGET_DIR:-target}/release/onejob"
fi
[ -x "$binary" ] || { echo "release.sh: no executable onejob at $binary" >&2; exit 1; }
"$binary" --version >/dev/null

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The tarball.
name="onejob-$version-$target"
tree="$work/$name"
mkdir -p "$tree/systemd" "$tree/completions"
install -m 0755 "$binary" "$tree/onejob"
install -m 0644 deploy/onejob-api.service deploy/onejob-worker.service "$tree/systemd/"
install -m 0644 deploy/onejob.toml "$tree/onejob.toml"
install -m 0644 README.md CHANGELOG.md LICENSE-APACHE LICENSE-MIT "$tree/"
"$binary" completions bash > "$tree/completions/onejob.bash"
"$binary" completions zsh > "$tree/completions/_onejob"
"$binary" completions fish > "$tree/completions/onejob.fish"
tar -C "$work" --owner=0 --group=0 --numeric-owner -czf "$out/$name.tar.gz" "$name"
(cd "$out" && sha256sum "$name.tar.gz" > "$name.tar.gz.sha256")

# The Debian package.
deb="$work/deb"
mkdir -p "$deb/DEBIAN" "$deb/usr/bin" "$deb/lib/systemd/system" "$deb/etc/onejob" \
  "$deb/usr/share/doc/onejob/examples" "$deb/usr/share/bash-completion/completions" \
  "$deb/usr/share/zsh/vendor-completions" "$deb/usr/share/fish/vendor_completions.d"
install -m 0755 "$binary" "$deb/usr/bin/onejob"
for unit in deploy/onejob-api.service deploy/onejob-worker.service; do
  sed 's#/usr/local/bin/onejob#/usr/bin/onejob#g' "$unit" > "$deb/lib/systemd/system/$(basename "$unit")"
  chmod 0644 "$deb/lib/systemd/system/$(basename "$unit")"
done
install -m 0644 deploy/onejob.toml "$deb/etc/onejob/onejob.toml"
install -m 0644 "$tree/completions/onejob.bash" "$deb/usr/share/bash-completion/completions/onejob"
install -m 0644 "$tree/completions/_onejob" "$deb/usr/share/zsh/vendor-completions/_onejob"
install -m 0644 "$tree/completions/onejob.fish" "$deb/usr/share/fish/vendor_completions.d/onejob.fish"
install -m 0644 README.md "$deb/usr/share/doc/onejob/README.md"
for example in examples/*/onejob.toml; do
  install -m 0644 "$example" "$deb/usr/share/doc/onejob/examples/$(basename "$(dirname "$example")").toml"
done
{
  echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
  echo "Upstream-Name: onejob"
  echo "Source: https://github.com/onejob/onejob"
  echo
  echo "Files: *"
  echo "Copyright: the onejob authors"
  echo "License: MIT or Apache-2.0"
  echo " The full texts are LICENSE-MIT and LICENSE-APACHE in the source and the tarball."
} > "$deb/usr/share/doc/onejob/copyright"
cat > "$deb/DEBIAN/control" <<EOF
Package: onejob
Version: $version-1
Architecture: $arch
Maintainer: the onejob authors <maintainers@onejob.dev>
Section: net
Priority: optional
Depends: libc6, passwd
Installed-Size: $(du -sk "$deb" | cut -f1)
Homepage: https://github.com/onejob/onejob
Description: one user intent, one job: an idempotent job service
 onejob sits between applications and upstreams whose calls are slow, costly or
 have side effects (AI model APIs, GPU jobs, payment and messaging APIs): every
 intent is one job, every retry or failover an attempt under it, and exactly
 one result wins. Units: onejob-api.service, onejob-worker.service.
EOF
echo /etc/onejob/onejob.toml > "$deb/DEBIAN/conffiles"
cat > "$deb/DEBIAN/postinst" <<'EOF'
#!/bin/sh
# The system user the units run as, and systemd told of the units (not started: a node
# needs its database set first, see /etc/onejob/onejob.toml).
set -e
if [ "$1" = configure ]; then
  if ! getent passwd onejob >/dev/null; then
    useradd --system --user-group --home-dir /var/lib/onejob --no-create-home \
      --shell /usr/sbin/nologin onejob
  fi
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || true
  fi
fi
EOF
cat > "$deb/DEBIAN/prerm" <<'EOF'
#!/bin/sh
# Stops the units before their binary goes.
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
  systemctl stop onejob-api.service onejob-worker.service >/dev/null 2>&1 || true
fi
EOF
chmod 0755 "$deb/DEBIAN/postinst" "$deb/DEBIAN/prerm"
debname="onejob_${version}-1_${arch}.deb"
dpkg-deb --root-owner-group --build "$deb" "$out/$debname" >/dev/null
(cd "$out" && sha256sum "$debname" > "$debname.sha256")

echo "$out/$name.tar.gz"
echo "$out/$debname"
