#!/usr/bin/env bash
# Boots Debian 12's own Linux 6.1 kernel under QEMU on several memory
# layouts and saves each guest's /proc and /sys files as a saved root,
# OUT/LAYOUT/proc/zoneinfo and so on, which `pfnlab snapshot --root
# OUT/LAYOUT` reads as it reads a live machine:
#
#   .ci/guests.sh OUT [LAYOUT...]      # every layout when none is named
#
# The kernel is the newest linux-image-6.1.0-N-amd64(-unsigned) package
# apt offers, fetched with `apt-get download` and unpacked into a
# temporary directory, never installed. The guest's whole userland is one
# static busybox in a small initramfs: its /init mounts proc, sysfs and
# devtmpfs, takes the layout's memory blocks offline (if it names any),
# copies the files below, and writes each to the second serial
# port between `@@begin PATH BYTES MD5` and `@@end PATH` lines, in base64,
# then `@@done` and powers off. The kernel's own console is the first
# serial port, so its messages never mix with the files. The kernel
# boots with `nokaslr`: a randomised physical load address moves its
# image, and the managed pages it takes, from node to node between boots.
#
# Where the kernel has a link, nodeN/memoryM to a memory block, the saved
# root has an empty file of that name: pfnlab reads the name only.
#
# Needs qemu-system-x86 and busybox-static (installed with apt-get when
# missing; root in CI). Uses KVM when a guest boots on /dev/kvm, and
# TCG otherwise. Each boot prints its wall time; a guest that does not
# finish within GUESTS_TIMEOUT seconds (default 300), a file that is
# missing or does not match its checksum, or a memory block the guest
# could not take offline, fails the run non-zero, naming the layout,
# after the other layouts have run.
set -euo pipefail

usage() {
  echo "usage: $0 OUT [LAYOUT...]" >&2
  echo "layouts: ${ALL_LAYOUTS[*]}" >&2
  exit 2
}

ALL_LAYOUTS=(plain numa-fake-64 memmap-holes movablecore-1g four-cpus-two-nodes cpuless-nodes
  offline-block)

# layout NAME: sets the guest's RAM (-m), CPUs (-smp), kernel parameters,
# QEMU NUMA options and the memory blocks its /init takes offline
# (offline, block numbers separated by commas) for one layout.
layout() {
  numa=() offline=""
  case $1 in
    plain)
      # One node, 2 GiB, 2 CPUs: the reference for the others.
      mem=2G smp=2 params="" ;;
    numa-fake-64)
      # One real node split by the kernel into 64 fake nodes of 48 MiB.
      mem=3G smp=2 params="numa=fake=64" ;;
    memmap-holes)
      # Two ranges of RAM the kernel reserves (e820 type 2), at 512 MiB
      # and 1280 MiB, leaving holes in the zones' spans.
      mem=2G smp=2 params='memmap=64M$0x20000000 memmap=32M$0x50000000' ;;
    movablecore-1g)
      # The top 1 GiB of RAM (the RAM above 4 GiB) in ZONE_MOVABLE.
      mem=4G smp=2 params="movablecore=1G" ;;
    four-cpus-two-nodes)
      # Two nodes of 1 GiB, two CPUs on each.
      mem=2G smp=4 params=""
      numa=(-object memory-backend-ram,id=m0,size=1G -object memory-backend-ram,id=m1,size=1G
        -numa node,nodeid=0,cpus=0-1,memdev=m0 -numa node,nodeid=1,cpus=2-3,memdev=m1) ;;
    cpuless-nodes)
      # Four nodes of 512 MiB; CPU 0 on node 0, CPU 1 on node 1, nodes 2
      # and 3 memory without CPUs.
      mem=2G smp=2 params=""
      numa=()
      local n
      for n in 0 1 2 3; do
        numa+=(-object "memory-backend-ram,id=m$n,size=512M")
      done
      numa+=(-numa node,nodeid=0,cpus=0,memdev=m0 -numa node,nodeid=1,cpus=1,memdev=m1
        -numa node,nodeid=2,memdev=m2 -numa node,nodeid=3,memdev=m3) ;;
    offline-block)
      # As plain, with memory block 8 (128 MiB at 1 GiB, inside DMA32)
      # taken offline by /init before it reads anything. The blocks go to
      # /init as offline_blocks=8 on the kernel command line: the kernel
      # hands a parameter it does not know, with a value and no dot in its
      # name, to init as an environment variable. /proc/cmdline shows it,
      # and pfnlab ignores it.
      mem=2G smp=2 offline=8
      params="offline_blocks=$offline" ;;
    *)
      echo "guests.sh: unknown layout '$1'" >&2
      usage ;;
  esac
}

# Files every layout must have saved (paths under the saved root).
REQUIRED=(
  proc/zoneinfo proc/buddyinfo proc/pagetypeinfo proc/meminfo proc/vmstat proc/iomem
  proc/cmdline proc/version proc/sys/kernel/osrelease
  proc/sys/vm/min_free_kbytes proc/sys/vm/lowmem_reserve_ratio proc/sys/vm/watermark_scale_factor
  sys/kernel/mm/transparent_hugepage/enabled
  sys/devices/system/cpu/online
  sys/devices/system/node/online sys/devices/system/node/has_cpu sys/devices/system/node/has_memory
  sys/devices/system/node/node0/cpulist sys/devices/system/node/node0/meminfo
  sys/devices/system/memory/block_size_bytes dev/kmsg
  sys/firmware/memmap/0/start sys/firmware/memmap/0/end sys/firmware/memmap/0/type
)

# The guest's /init: saves the files, sends them, powers off.
guest_init() {
  cat <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec >/dev/ttyS1 2>&1
stty -F /dev/ttyS1 raw -echo 115200

# The layout's memory blocks (offline_blocks=8,9 on the kernel command
# line) go offline first, each saying so on both serial ports:
# `@@offline memoryN offline`, or `failed` and why.
for n in $(echo "${offline_blocks:-}" | tr , ' '); do
  b=/sys/devices/system/memory/memory$n
  why=$( (echo offline >"$b/state") 2>&1)
  state=$(cat "$b/state" 2>/dev/null || echo missing)
  if [ "$state" = offline ]; then
    line="@@offline memory$n offline"
  else
    line="@@offline memory$n failed: state $state${why:+, $why}"
  fi
  echo "$line"
  echo "$line" >/dev/ttyS0
done

# save PATH...: copies each file that exists under /snap.
save() {
  for f in "$@"; do
    [ -f "$f" ] || continue
    mkdir -p "/snap$(dirname "$f")"
    cat "$f" >"/snap$f"
  done
}

# The free lists first: buddyinfo and pagetypeinfo read by one cat into
# a file whose pages exist already (zeroed, written in place), so that
# nothing between the two reads allocates from the CPU's node (its
# per-CPU lists refill from the free lists in batches as small as one
# page with 64 fake nodes); again, up to 128 times, until buddyinfo's
# counts are pagetypeinfo's sums over the migratetypes, the two then
# showing one state (a count pagetypeinfo caps at 100000 is a lower
# bound).
mkdir -p /snap/proc
head -c 1048576 /dev/zero >/tmp/pair
tries=0 pair=differ
while :; do
  dd if=/dev/zero of=/tmp/pair bs=65536 count=16 conv=notrunc 2>/dev/null
  cat /proc/buddyinfo /proc/pagetypeinfo 1<>/tmp/pair
  tr -d '\000' </tmp/pair | awk '
    /^Page block order/ { out = "/snap/proc/pagetypeinfo" }
    { print > (out ? out : "/snap/proc/buddyinfo") }'
  tries=$((tries + 1))
  awk '
    FNR == NR && /^Node.*, type / {
      for (i = 7; i <= NF; i++) { s[$2 $4, i] += $i; if ($i >= 100000) cap[$2 $4, i] = 1 }
      next
    }
    FNR != NR && /^Node/ {
      for (i = 5; i <= NF; i++) {
        k = $2 $4 ","
        if (s[k, i + 2] != $i && !(cap[k, i + 2] && s[k, i + 2] <= $i)) bad = 1
      }
    }
    END { exit bad }' /snap/proc/pagetypeinfo /snap/proc/buddyinfo && { pair=agree; break; }
  [ "$tries" -lt 128 ] || break
done
rm /tmp/pair
echo "@@pair $pair $tries"
save /proc/zoneinfo /proc/meminfo /proc/vmstat /proc/iomem /proc/cmdline /proc/version
save /proc/sys/kernel/osrelease
for f in min_free_kbytes lowmem_reserve_ratio watermark_scale_factor percpu_pagelist_high_fraction; do
  save /proc/sys/vm/$f
done
save /sys/kernel/mm/transparent_hugepage/enabled /sys/devices/system/cpu/online
for f in online possible has_cpu has_memory has_normal_memory; do
  save /sys/devices/system/node/$f
done
for d in /sys/devices/system/node/node*; do
  save "$d/cpulist" "$d/meminfo"
  for m in "$d"/memory*; do
    [ -e "$m" ] && : >"/snap$m"
  done
done
# The kernel's log, as /dev/kmsg gives it (records until none is left:
# cat waits at the end, so timeout stops it): pfnlab reads from it the
# memory boot freed after sizing its zones.
mkdir -p /snap/dev
timeout 1 cat /dev/kmsg >/snap/dev/kmsg 2>/dev/null || true
save /sys/devices/system/memory/block_size_bytes
for d in /sys/devices/system/memory/memory*; do
  save "$d/state" "$d/valid_zones" "$d/phys_index"
done
for d in /sys/firmware/memmap/*; do
  save "$d/start" "$d/end" "$d/type"
done

cd /snap
find . -type f | sort | while read -r f; do
  f=${f#./}
  echo "@@begin $f $(wc -c <"$f") $(md5sum <"$f" | cut -d' ' -f1)"
  base64 "$f"
  echo "@@end $f"
done
echo "@@done"
sync
poweroff -f
EOF
}

# boot NAME: boots one layout and writes its saved root under OUT/NAME;
# returns non-zero, having said why, when it cannot.
boot() {
  local name=$1 dir="$tmp/$1" dest="$out/$1"
  layout "$name"
  mkdir -p "$dir"
  local start=$EPOCHREALTIME rc=0
  timeout "$boot_timeout" qemu-system-x86_64 "${accel[@]}" -nographic -no-reboot -monitor none \
    -m "$mem" -smp "$smp" "${numa[@]}" \
    -kernel "$vmlinuz" -initrd "$tmp/initrd.gz" \
    -append "console=ttyS0 panic=-1 nokaslr${params:+ $params}" \
    -serial "file:$dir/console.log" -serial "file:$dir/data.log" \
    </dev/null >"$dir/qemu.log" 2>&1 || rc=$?
  local took
  took=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  if [ "$rc" -eq 124 ]; then
    failed "$name" "did not power off within ${boot_timeout} s (boot took over ${took} s)"
    return 1
  fi
  if ! tr -d '\r' <"$dir/data.log" | grep -qx '@@done'; then
    failed "$name" "QEMU exited ($rc) after ${took} s without the guest sending every file"
    return 1
  fi
  echo "$name: booted and saved in ${took} s (-m $mem -smp $smp, ${params:-no layout parameters})"
  local pair
  pair=$(tr -d '\r' <"$dir/data.log" | awk '/^@@pair / { print $2, $3 }')
  case $pair in
    "agree "*) echo "$name: buddyinfo and pagetypeinfo agree (read ${pair#agree } times)" ;;
    *) echo "$name: warning: buddyinfo and pagetypeinfo still differ after ${pair#* } reads" >&2 ;;
  esac
  rm -rf "$dest"
  mkdir -p "$dest"
  unpack "$name" "$dir" "$dest" || return 1
  offlined "$name" "$dir" "$dest"
}

# offlined NAME DIR DEST: says which of the layout's memory blocks the
# guest took offline, and fails unless each did and its saved state says
# offline.
offlined() {
  local name=$1 dir=$2 dest=$3 n line state size bad=0
  size=$((0x$(cat "$dest/sys/devices/system/memory/block_size_bytes")))
  for n in ${offline//,/ }; do
    line=$(tr -d '\r' <"$dir/data.log" | awk -v b="memory$n" '$1 == "@@offline" && $2 == b')
    state=$(cat "$dest/sys/devices/system/memory/memory$n/state" 2>/dev/null || echo missing)
    if [ "$line" = "@@offline memory$n offline" ] && [ "$state" = offline ]; then
      printf '%s: memory%s [%#x-%#x] taken offline\n' "$name" "$n" $((n * size)) $((n * size + size - 1))
    else
      echo "guests.sh: $name: memory$n not taken offline: ${line:-the guest did not try}; saved state $state" >&2
      bad=1
    fi
  done
  if [ "$bad" -ne 0 ]; then
    failed "$name" "memory blocks not taken offline"
    return 1
  fi
}

# unpack NAME DIR DEST: decodes DIR/data.log into DEST, checking each
# file's size and checksum and that every required file came.
unpack() {
  local name=$1 dir=$2 dest=$3 path size sum bad=0
  tr -d '\r' <"$dir/data.log" | awk -v parts="$dir/parts" '
    /^@@begin / { n++; print $2, $3, $4 > (parts ".index"); file = parts "." n; printf "" > file; next }
    /^@@end / { close(file); file = ""; next }
    file != "" { print > file }'
  local n=0
  while read -r path size sum; do
    n=$((n + 1))
    mkdir -p "$dest/$(dirname "$path")"
    base64 -d <"$dir/parts.$n" >"$dest/$path"
    if [ "$(wc -c <"$dest/$path")" -ne "$size" ] \
      || [ "$(md5sum <"$dest/$path" | cut -d' ' -f1)" != "$sum" ]; then
      echo "guests.sh: $name: $path arrived damaged" >&2
      bad=1
    fi
  done <"$dir/parts.index"
  for path in "${REQUIRED[@]}"; do
    if [ ! -f "$dest/$path" ]; then
      echo "guests.sh: $name: the guest has no $path" >&2
      bad=1
    fi
  done
  if ! compgen -G "$dest/sys/devices/system/memory/memory*/state" >/dev/null; then
    echo "guests.sh: $name: the guest has no memory blocks" >&2
    bad=1
  fi
  if [ "$bad" -ne 0 ]; then
    failed "$name" "files missing or damaged"
    return 1
  fi
  echo "$name: $n files, $(find "$dest" -type f -exec cat {} + | wc -c) bytes in $dest"
}

# failed NAME WHY: says so, with the end of the guest's console.
failed() {
  echo "guests.sh: $1: FAILED: $2" >&2
  if [ -s "$tmp/$1/console.log" ]; then
    echo "--- the last lines of $1's console:" >&2
    tail -n 20 "$tmp/$1/console.log" >&2
  fi
  if [ -s "$tmp/$1/qemu.log" ]; then
    echo "--- QEMU said:" >&2
    cat "$tmp/$1/qemu.log" >&2
  fi
}

[ $# -ge 1 ] || usage
out=$1
shift
layouts=("$@")
[ ${#layouts[@]} -gt 0 ] || layouts=("${ALL_LAYOUTS[@]}")
for name in "${layouts[@]}"; do
  layout "$name"
done
boot_timeout=${GUESTS_TIMEOUT:-300}

export DEBIAN_FRONTEND=noninteractive
if ! command -v qemu-system-x86_64 >/dev/null || [ ! -x /bin/busybox ] \
  || ! dpkg -s busybox-static >/dev/null 2>&1; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends qemu-system-x86 busybox-static >/dev/null
fi

# The newest Debian 12 kernel 6.1 for amd64; the unsigned package holds
# the same image as the signed one, and sorts after it.
pick_kernel() {
  apt-cache pkgnames linux-image-6.1.0- \
    | grep -E '^linux-image-6\.1\.0-[0-9]+-amd64(-unsigned)?$' | sort -V | tail -n 1
}
pkg=$(pick_kernel || true)
if [ -z "$pkg" ]; then
  apt-get update -qq
  pkg=$(pick_kernel || true)
fi
[ -n "$pkg" ] || { echo "guests.sh: apt offers no linux-image-6.1.0-N-amd64 package" >&2; exit 1; }
version=$(apt-cache policy "$pkg" | awk '/Candidate:/ { print $2 }')
echo "kernel: $pkg $version"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download -qq -o APT::Sandbox::User=root "$pkg=$version")
dpkg-deb -x "$tmp"/"$pkg"_*.deb "$tmp/pkg"
vmlinuz=$(echo "$tmp"/pkg/boot/vmlinuz-*)
[ -f "$vmlinuz" ] || { echo "guests.sh: $pkg has no /boot/vmlinuz-*" >&2; exit 1; }

mkdir -p "$tmp/initrd/bin" "$tmp/initrd/proc" "$tmp/initrd/sys" "$tmp/initrd/dev" "$tmp/initrd/snap" \
  "$tmp/initrd/tmp"
cp /bin/busybox "$tmp/initrd/bin/busybox"
guest_init >"$tmp/initrd/init"
chmod 755 "$tmp/initrd/init"

# KVM when /dev/kvm opens and a guest boots on it: nested under some
# hypervisors it opens but the guest hangs or QEMU aborts, so a guest
# whose /probe only says so and powers off must do that within 30 s
# first.
cat >"$tmp/initrd/probe" <<'EOF'
#!/bin/busybox sh
/bin/busybox mount -t devtmpfs devtmpfs /dev
echo @@probe-ok >/dev/ttyS0
/bin/busybox poweroff -f
EOF
chmod 755 "$tmp/initrd/probe"
(cd "$tmp/initrd" && find . | busybox cpio -o -H newc -R 0:0 2>/dev/null) | gzip -9 >"$tmp/initrd.gz"
accel=()
if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
  timeout 30 qemu-system-x86_64 -enable-kvm -nographic -no-reboot -monitor none -m 256M \
    -kernel "$vmlinuz" -initrd "$tmp/initrd.gz" -append "console=ttyS0 panic=-1 rdinit=/probe" \
    -serial "file:$tmp/kvm-probe.console" </dev/null >"$tmp/kvm-probe.log" 2>&1 || true
  if tr -d '\r' <"$tmp/kvm-probe.console" 2>/dev/null | grep -q '@@probe-ok'; then
    accel=(-enable-kvm)
    echo "accelerator: KVM"
  else
    echo "accelerator: TCG (a guest does not boot on this machine's /dev/kvm)"
  fi
else
  echo "accelerator: TCG (no /dev/kvm)"
fi

failures=()
for name in "${layouts[@]}"; do
  boot "$name" || failures+=("$name")
done
if [ ${#failures[@]} -gt 0 ]; then
  echo "guests.sh: FAILED layouts: ${failures[*]}" >&2
  exit 1
fi
echo "every layout saved under $out"
