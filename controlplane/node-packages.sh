#!/usr/bin/env bash
# Installs the Debian packages the local cluster's real node runs with (runc, the CNI plugins,
# iptables, iproute2) and makes sure apt can download the packages its images are assembled
# from (busybox-static, tini). busybox-static is installed on the machine too: the unit test of
# the leftover-process scan runs it under BusyBox's sh, the shell of the node's busybox images.
# Does nothing when all is there; without root or apt it says what is missing and exits 0, and
# `make dev` then falls back to kwok's fake node.
set -euo pipefail
packages=(runc containernetworking-plugins iptables iproute2 busybox-static)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
done
need_lists=0
for package in busybox-static tini; do
  apt-cache policy "$package" 2>/dev/null | grep -q 'Candidate: [0-9]' || need_lists=1
done
if [[ ${#missing[@]} -eq 0 && $need_lists -eq 0 ]]; then
  echo "node packages: installed"
  exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
  if [[ "${missing[*]}" == busybox-static && $need_lists -eq 0 ]]; then
    # Only the test's BusyBox: the real node itself can run.
    echo "node packages: busybox-static not installed; needs root and apt-get: the leftover scan's BusyBox test will be skipped"
  else
    echo "node packages: not installed (${missing[*]:-apt lists}); needs root and apt-get: the real node is unavailable"
  fi
  exit 0
fi
apt-get update -qq
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "node packages: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "node packages: installed"
