#!/usr/bin/env bash
# Proves the README's quick start on a fresh Debian 12 (bookworm): builds a
# minimal root with debootstrap, copies a clean clone of this repository's HEAD
# into it, and runs the README's two commands there under chroot. Prints one
# line per command: passed (with its time) or failed (with the end of its log).
# A green CI on a used machine cannot show this: packages installed there by
# hand hide what setup.sh forgot. Needs root and Debian's package mirror only.
#
# usage: scripts/check_fresh_machine.sh [--workdir DIR] [--keep] [--mirror URL] [--timeout SECONDS]
#   --workdir DIR   where the root and logs go (default: a new directory under /var/tmp)
#   --keep          keep the root afterwards (to look inside); logs are always kept
#   --mirror URL    Debian mirror (default http://deb.debian.org/debian)
#   --timeout S     limit per command (default 7200)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

workdir="" keep=false mirror=http://deb.debian.org/debian timeout_s=7200
while (($#)); do
  case $1 in
    --workdir) workdir=${2:?--workdir needs a directory}; shift 2 ;;
    --keep) keep=true; shift ;;
    --mirror) mirror=${2:?--mirror needs a URL}; shift 2 ;;
    --timeout) timeout_s=${2:?--timeout needs seconds}; shift 2 ;;
    *) echo "check_fresh_machine.sh: unknown argument '$1' (see the usage at the top of the script)" >&2; exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "check_fresh_machine.sh: needs root (debootstrap, mount, chroot)" >&2; exit 2; }
[[ -n $workdir ]] || workdir=$(mktemp -d /var/tmp/strata-fresh.XXXXXX)
mkdir -p "$workdir"
root=$workdir/root
logs=$workdir/logs
mkdir -p "$logs"

mounted_under_root() { awk -v r="$root/" 'index($2, r) == 1 { print $2 }' /proc/self/mounts; }

# Processes started inside the root (an MPI daemon, a stuck test) would keep its
# mounts busy; end them before unmounting.
kill_root_processes() {
  local pid link
  for pid in /proc/[0-9]*; do
    link=$(readlink "$pid/root" 2>/dev/null) || continue
    [[ $link == "$root" ]] && kill -KILL "${pid#/proc/}" 2>/dev/null || true
  done
}

cleanup() {
  local status=$?
  [[ -d $root ]] || exit "$status"
  kill_root_processes
  local point
  # Deepest first: /dev/pts before /dev.
  for point in $(mounted_under_root | sort -r); do
    umount "$point" 2>/dev/null || umount -l "$point" 2>/dev/null || true
  done
  if [[ -n $(mounted_under_root) ]]; then
    # Never delete through a live bind mount: that would delete the host's /dev.
    echo "check_fresh_machine.sh: still mounted under $root, left in place:" >&2
    mounted_under_root >&2
  elif ! $keep; then
    rm -rf "$root"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! command -v debootstrap > /dev/null; then
  echo "installing debootstrap"
  apt-get update -q > "$logs/debootstrap-install.log" 2>&1
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >> "$logs/debootstrap-install.log" 2>&1
fi

start=$SECONDS
echo "debootstrap: bookworm minbase into $root (log: $logs/debootstrap.log)"
if ! debootstrap --variant=minbase bookworm "$root" "$mirror" > "$logs/debootstrap.log" 2>&1; then
  echo "debootstrap: failed"; tail -n 20 "$logs/debootstrap.log"; exit 1
fi
echo "debootstrap: done in $((SECONDS - start)) s"

# What a freshly installed Debian 12 has: the release, its updates and security suites.
mirror_host=${mirror%/debian}
cat > "$root/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $mirror_host/debian-security bookworm-security main
EOF
cp -L /etc/resolv.conf "$root/etc/resolv.conf"

git clone --quiet --no-hardlinks "$repo" "$root/root/strata"
commit=$(git -C "$root/root/strata" rev-parse --short HEAD)
echo "repository: clean clone of $commit (uncommitted changes are not part of the check)"

mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys" && mount --make-rslave "$root/sys"
mount --rbind /dev "$root/dev" && mount --make-rslave "$root/dev"

# Runs one README command in the root with a clean environment, as a new root
# user's login shell would have it.
run_in_root() {
  local name=$1 command=$2 log=$logs/$1.log began=$SECONDS
  if timeout --kill-after=60 "$timeout_s" chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
       PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
       /bin/bash -c "cd /root/strata && $command" > "$log" 2>&1; then
    kill_root_processes
    echo "$command: passed in $((SECONDS - began)) s (log: $log)"
    return 0
  fi
  kill_root_processes
  echo "$command: FAILED after $((SECONDS - began)) s (log: $log); its last lines:"
  tail -n 25 "$log" | sed 's/^/    /'
  return 1
}

failures=0
run_in_root quickstart "bash scripts/quickstart.sh" || failures=$((failures + 1))
run_in_root test "bash scripts/test.sh" || failures=$((failures + 1))
echo "check_fresh_machine.sh: $((2 - failures)) of 2 README commands passed on a fresh bookworm root ($((SECONDS - start)) s in all)"
((failures == 0))
