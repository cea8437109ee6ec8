#!/usr/bin/env bash
# Makes sure the images the Dockerfile and docker-compose.yml start FROM exist in the local
# Docker engine: debian:12, debian:12-slim and prom/prometheus:v2.42.0. Each one is pulled
# when a registry answers; otherwise it is made here, so the Dockerfile and the compose file
# stay the ones a user with a registry runs unchanged:
#   debian:12        debootstrap --variant=minbase bookworm + docker import (about 40 s)
#   debian:12-slim   the same with the official slim image's dpkg path excludes (no docs,
#                    man pages or translations)
#   prom/prometheus  a stand-in built from Debian's `prometheus` package (2.42, the version
#                    the compose file names) with the official image's entrypoint, user,
#                    paths and port
# An image already present is left alone. DOCKER (default: docker on the PATH) is the client.
#   base_images.sh [MIRROR]     (default http://deb.debian.org/debian)
set -euo pipefail
docker="${DOCKER:-docker}"
mirror="${1:-http://deb.debian.org/debian}"
prom_image="prom/prometheus:v2.42.0"

have() { "$docker" image inspect "$1" >/dev/null 2>&1; }
pulled() { timeout 120 "$docker" pull -q "$1" >/dev/null 2>&1; }

work=""
cleanup() { if [ -n "$work" ]; then rm -rf "$work"; fi; }
trap cleanup EXIT

rootfs() {  # the debootstrapped tree, made once per run
  if [ -z "$work" ]; then
    work="$(mktemp -d /tmp/kiln-base.XXXXXX)"
    echo "base_images: debootstrap --variant=minbase bookworm ($mirror)"
    debootstrap --variant=minbase bookworm "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
      { tail -20 "$work/debootstrap.log"; exit 1; }
    # As in Debian's official images: the release, its updates and security, no package
    # lists or downloaded .debs left in the image, no translations.
    rm -f "$work/root/etc/apt/sources.list"
    cat >"$work/root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    cat >"$work/root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
    echo 'Acquire::Languages "none";' >"$work/root/etc/apt/apt.conf.d/docker-no-languages"
    rm -rf "$work/root/var/lib/apt/lists/"* "$work/root/var/cache/apt/"*.bin \
      "$work/root/var/cache/apt/archives/"*.deb
  fi
}

import() {  # import NAME: the tree as an image, `bash` as its command like the official one
  tar -C "$work/root" --numeric-owner -c . |
    "$docker" import -c 'CMD ["bash"]' -m "debootstrap --variant=minbase bookworm" - "$1" >/dev/null
  echo "base_images: made $1 ($("$docker" image inspect -f '{{.Size}}' "$1") bytes)"
}

if ! have debian:12 && ! pulled debian:12; then
  rootfs
  import debian:12
fi
if ! have debian:12-slim && ! pulled debian:12-slim; then
  rootfs
  # The official slim variant's excludes: documentation (copyright files kept), man pages,
  # info, lintian overrides and translations, now and for every later install.
  cat >"$work/root/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
  find "$work/root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$work/root/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$work/root/usr/share/man/"* "$work/root/usr/share/groff/"* \
    "$work/root/usr/share/info/"* "$work/root/usr/share/lintian/"* "$work/root/usr/share/linda/"*
  find "$work/root/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias \
    -exec rm -rf {} +
  import debian:12-slim
fi
if ! have "$prom_image" && ! pulled "$prom_image"; then
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  echo "base_images: building the $prom_image stand-in from Debian's prometheus package"
  DOCKER_BUILDKIT=1 "$docker" build -q -t "$prom_image" "$here/prometheus-standin" >/dev/null
  echo "base_images: made $prom_image"
fi
