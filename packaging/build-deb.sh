#!/bin/bash
# Builds the Debian package with cargo-deb (installed here if missing), installs it, and shows
# that the service's files are in place. Run as root on Debian; it does not run in CI.
# Usage: bash packaging/build-deb.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO_DEB_VERSION=2.7.0
if ! cargo deb --version 2>/dev/null | grep -q "$CARGO_DEB_VERSION"; then
    cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked
fi
cargo deb -p tierkv-server
deb=$(ls -t target/debian/tierkv_*.deb | head -1)
echo "built $deb"
dpkg-deb --info "$deb" | sed -n '1,20p'
dpkg-deb --contents "$deb"
dpkg -i "$deb"
tierkv --version
systemd-analyze verify /lib/systemd/system/tierkv.service
echo "installed; start it with: systemctl enable --now tierkv"
